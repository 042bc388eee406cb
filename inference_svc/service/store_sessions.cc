#include "inference_svc/service/store_sessions.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference_svc/memory/session_block.h"
#include "inference_svc/service/proto_convert.h"

namespace kvfold::service {

absl::Status StoreError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kCancelled:
      std::fprintf(stderr, "kvfold-inference: store call failed: %s\n",
                   status.ToString().c_str());
      return absl::Status(status.code(),
                          absl::StrCat("the memory store is unavailable (",
                                       absl::StatusCodeToString(status.code()),
                                       "); retry with backoff"));
    default:
      return status;
  }
}

absl::Status DescribeStoredSession(StoreGateway& store, const std::string& credential,
                                   const std::string& session_id, uint64_t kv_bytes_per_token,
                                   v1::Session* out) {
  auto info = store.GetSessionInfo(credential, session_id);
  if (!info.ok()) return StoreError(info.status());
  auto block = store.GetBlock(credential, session_id, info->head_version(), nullptr);
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
  out->set_kv_bytes_resident(resident * kv_bytes_per_token);
  out->set_memory_block_bytes(h.payload_size());
  out->set_model_fingerprint(h.model_fingerprint());
  out->set_projector_fingerprint(h.projector_fingerprint());
  return absl::OkStatus();
}

absl::Status ListStoredSessions(StoreGateway& store, const std::string& credential,
                                uint32_t page_size, const std::string& page_token,
                                uint64_t kv_bytes_per_token, v1::ListSessionsResponse* out) {
  if (page_size > 1000) return absl::InvalidArgumentError("page_size must be <= 1000");
  auto page = store.ListSessions(credential, page_size, page_token);
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
    s->set_kv_bytes_resident(info.resident_tokens() * kv_bytes_per_token);
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

StoreSessions::StoreSessions(StoreGateway* gateway, const engine::Engine* engine,
                             const memory::Projector* projector)
    : gateway_(gateway), engine_(engine), projector_(projector) {}

absl::StatusOr<uint64_t> StoreSessions::HeadVersion(const runtime::Caller& caller,
                                                    const std::string& session_id) {
  auto info = gateway_->GetSessionInfo(caller.store_credential, session_id);
  if (!info.ok()) return StoreError(info.status());
  return info->head_version();
}

absl::StatusOr<runtime::Checkpoint> StoreSessions::Load(const runtime::Caller& caller,
                                                        const std::string& session_id,
                                                        uint64_t version) {
  auto block = gateway_->GetBlock(caller.store_credential, session_id, version, nullptr);
  if (!block.ok()) return StoreError(block.status());
  const v1::MemoryBlockHeader& h = block->header;
  // Checksum, model and projector fingerprints, geometry (memory_block.h's codes).
  auto state = memory::ImportSessionBlock(*block, memory::ExpectationsFor(*engine_, projector_));
  if (!state.ok()) return state.status();
  runtime::Checkpoint checkpoint;
  checkpoint.state = std::move(*state);
  checkpoint.sampling = FromProto(h.sampler_state().params());
  // Missing words stay zero: the runtime restarts such an RNG from the session's seed.
  if (h.sampler_state().rng_state_size() == 4) {
    for (int i = 0; i < 4; ++i) checkpoint.rng_state[i] = h.sampler_state().rng_state(i);
  }
  return checkpoint;
}

absl::StatusOr<uint64_t> StoreSessions::Commit(const runtime::Caller& caller,
                                               const std::string& session_id,
                                               uint64_t expected_head,
                                               const runtime::Checkpoint& checkpoint) {
  v1::SamplerState sampler;
  *sampler.mutable_params() = ToProto(checkpoint.sampling);
  for (uint64_t w : checkpoint.rng_state) sampler.add_rng_state(w);
  auto block = memory::ExportSessionBlock(checkpoint.state,
                                         memory::IdentityFor(*engine_, projector_), sampler);
  if (!block.ok()) return block.status();
  auto version = gateway_->PutBlock(caller.store_credential, session_id, expected_head, *block);
  if (!version.ok()) return StoreError(version.status());
  return *version;
}

}  // namespace kvfold::service
