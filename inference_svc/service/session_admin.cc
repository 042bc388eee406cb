// SessionAdmin (session_admin.h).
#include "inference_svc/service/session_admin.h"

#include "inference_svc/service/proto_convert.h"
#include "inference_svc/service/store_sessions.h"
#include "inference_svc/service/validation.h"

namespace kvfold::service {

absl::Status SessionAdmin::Create(const runtime::Caller& caller,
                                  const v1::CreateSessionRequest& request, v1::Session* out) const {
  const std::string session_id =
      request.session_id().empty() ? NewSessionId() : request.session_id();
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  auto session_request = FromProto(request.config());
  if (!session_request.ok()) return session_request.status();
  auto version = runtime_->CreateSession(caller, session_id, *session_request,
                                         FromProto(request.sampling()), request.system_prompt());
  if (!version.ok()) return version.status();
  return out == nullptr ? absl::OkStatus() : Get(caller, session_id, out);
}

absl::Status SessionAdmin::Get(const runtime::Caller& caller, const std::string& session_id,
                               v1::Session* out) const {
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  const std::string& credential = caller.store_credential;
  auto info = store_->GetSessionInfo(credential, session_id);
  if (!info.ok()) return StoreError(info.status());
  auto block = store_->GetBlock(credential, session_id, info->head_version(), nullptr);
  if (!block.ok()) return StoreError(block.status());
  const v1::MemoryBlockHeader& h = block->header;
  out->Clear();
  out->set_session_id(session_id);
  out->set_head_version(info->head_version());
  out->set_created_unix_ms(info->created_unix_ms());
  out->set_updated_unix_ms(info->updated_unix_ms());
  out->mutable_config()->set_mode(h.kv_mode());
  out->mutable_config()->set_window_size(h.window_size());
  out->mutable_config()->set_sink_tokens(h.sink_tokens());
  *out->mutable_sampling() = h.sampler_state().params();
  out->set_total_tokens(h.total_tokens());
  out->set_tokens_folded(h.tokens_folded());
  const uint64_t resident =
      static_cast<uint64_t>(h.window_token_ids_size()) + h.sink_token_ids_size() + h.mem_slots();
  out->set_resident_tokens(resident);
  out->set_kv_bytes_resident(resident * kv_bytes_per_token_);
  out->set_memory_block_bytes(h.payload_size());
  out->set_model_fingerprint(h.model_fingerprint());
  out->set_projector_fingerprint(h.projector_fingerprint());
  return absl::OkStatus();
}

absl::Status SessionAdmin::List(const runtime::Caller& caller,
                                const v1::ListSessionsRequest& request,
                                v1::ListSessionsResponse* out) const {
  if (request.page_size() > 1000) return absl::InvalidArgumentError("page_size must be <= 1000");
  auto page =
      store_->ListSessions(caller.store_credential, request.page_size(), request.page_token());
  if (!page.ok()) return StoreError(page.status());
  out->Clear();
  for (const v1::SessionInfo& info : page->sessions()) {
    v1::Session* s = out->add_sessions();
    s->set_session_id(info.session_id());
    s->mutable_config()->set_mode(info.kv_mode());
    s->mutable_config()->set_window_size(info.window_size());
    s->mutable_config()->set_sink_tokens(info.sink_tokens());
    s->set_head_version(info.head_version());
    s->set_total_tokens(info.total_tokens());
    s->set_tokens_folded(info.tokens_folded());
    s->set_resident_tokens(info.resident_tokens());
    s->set_kv_bytes_resident(info.resident_tokens() * kv_bytes_per_token_);
    s->set_memory_block_bytes(info.payload_size());
    s->set_model_fingerprint(info.model_fingerprint());
    s->set_projector_fingerprint(info.projector_fingerprint());
    s->set_created_unix_ms(info.created_unix_ms());
    s->set_updated_unix_ms(info.updated_unix_ms());
  }
  out->set_next_page_token(page->next_page_token());
  if (page->has_usage()) *out->mutable_usage() = page->usage();
  return absl::OkStatus();
}

absl::Status SessionAdmin::Delete(const runtime::Caller& caller, const std::string& session_id,
                                  v1::DeleteSessionResponse* out) const {
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  auto deleted = store_->Delete(caller.store_credential, session_id);
  runtime_->Forget(caller, session_id);
  if (!deleted.ok()) return StoreError(deleted.status());
  out->set_versions_deleted(*deleted);
  return absl::OkStatus();
}

absl::Status SessionAdmin::Fork(const runtime::Caller& caller,
                                const v1::ForkSessionRequest& request, v1::Session* out) const {
  if (absl::Status s = ValidateSessionId(request.source_session_id()); !s.ok()) return s;
  const std::string new_id =
      request.new_session_id().empty() ? NewSessionId() : request.new_session_id();
  if (absl::Status s = ValidateSessionId(new_id); !s.ok()) return s;
  auto forked =
      store_->Fork(caller.store_credential, request.source_session_id(), request.version(), new_id);
  if (!forked.ok()) return StoreError(forked.status());
  return out == nullptr ? absl::OkStatus() : Get(caller, new_id, out);
}

absl::Status SessionAdmin::Rollback(const runtime::Caller& caller,
                                    const v1::RollbackSessionRequest& request,
                                    v1::Session* out) const {
  if (absl::Status s = ValidateSessionId(request.session_id()); !s.ok()) return s;
  if (request.version() == 0) return absl::InvalidArgumentError("version must be >= 1");
  auto info = store_->SetHead(caller.store_credential, request.session_id(), request.version());
  // The cached copy is at another version now; the next turn restores the new head.
  runtime_->Forget(caller, request.session_id());
  if (!info.ok()) return StoreError(info.status());
  return Get(caller, request.session_id(), out);
}

}  // namespace kvfold::service
