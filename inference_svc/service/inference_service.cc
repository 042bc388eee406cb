// InferenceServiceImpl: shared helpers and the unary RPCs. Generate: service_generate.cc.
#include "inference_svc/service/inference_service.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/proto_enums.h"
#include "inference_svc/planner/planner_proto.h"
#include "inference_svc/service/proto_convert.h"
#include "inference_svc/service/store_sessions.h"
#include "inference_svc/service/validation.h"

namespace kvfold::service {
namespace {

planner::ModelSpec SpecOf(const model::ModelConfig& c) {
  planner::ModelSpec s = planner::SpecFromModelConfig(c, c.architecture);
  s.source = "served model";
  return s;
}

}  // namespace

InferenceServiceImpl::InferenceServiceImpl(const ServiceDeps& deps)
    : deps_(deps),
      config_(*deps.config),
      replica_name_(deps.config->replica_name.empty() ? deps.config->listen
                                                      : deps.config->replica_name),
      // What one token costs in this engine's pool, in its KV dtype (docs/contracts.md,
      // "KV bytes").
      kv_bytes_per_token_(deps.engine->pool().bytes_per_token()),
      served_spec_(SpecOf(deps.engine->config())) {}

absl::StatusOr<runtime::Caller> InferenceServiceImpl::Authenticate(
    const grpc::ServerContext& context) const {
  if (draining_.load()) return absl::UnavailableError("the replica is draining (shutting down)");
  auto tenant = AuthenticateTenant(deps_.tokens, context);
  if (!tenant.ok()) return tenant.status();
  runtime::Caller caller;
  caller.tenant = *tenant;
  Annotate(&context, [&](logging::RequestRecord* r) { r->tenant = caller.tenant; });
  caller.store_credential = config_.store_token;
  const auto& md = context.client_metadata();
  if (auto it = md.find("authorization"); it != md.end()) {
    std::string value(it->second.data(), it->second.size());
    if (value.rfind("Bearer ", 0) == 0 && value.size() > 7) caller.store_credential = value.substr(7);
  }
  return caller;
}

grpc::Status InferenceServiceImpl::CreateSession(grpc::ServerContext* context,
                                                 const v1::CreateSessionRequest* request,
                                                 v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const std::string session_id =
      request->session_id().empty() ? NewSessionId() : request->session_id();
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return ToGrpcStatus(s);
  AnnotateSession(context, session_id);
  auto session_request = FromProto(request->config());
  if (!session_request.ok()) return ToGrpcStatus(session_request.status());
  auto version = deps_.runtime->CreateSession(*caller, session_id, *session_request,
                                              FromProto(request->sampling()),
                                              request->system_prompt());
  if (!version.ok()) return ToGrpcStatus(version.status());
  return ToGrpcStatus(DescribeSession(*caller, session_id, response));
}

absl::Status InferenceServiceImpl::DescribeSession(const runtime::Caller& caller,
                                                   const std::string& session_id,
                                                   v1::Session* out) {
  auto info = deps_.store->GetSessionInfo(caller.store_credential, session_id);
  if (!info.ok()) return StoreError(info.status());
  out->Clear();
  out->set_session_id(session_id);
  out->set_head_version(info->head_version());
  out->set_created_unix_ms(info->created_unix_ms());
  out->set_updated_unix_ms(info->updated_unix_ms());
  out->set_model_fingerprint(deps_.engine->fingerprint());
  auto block = deps_.store->GetBlock(caller.store_credential, session_id, info->head_version(), nullptr);
  if (!block.ok()) return StoreError(block.status());
  const v1::MemoryBlockHeader& h = block->header;
  out->mutable_config()->set_mode(h.kv_mode());
  out->mutable_config()->set_window_size(h.window_size());
  out->mutable_config()->set_sink_tokens(h.sink_tokens());
  *out->mutable_sampling() = h.sampler_state().params();
  out->set_total_tokens(h.total_tokens());
  out->set_tokens_folded(h.tokens_folded());
  const uint64_t resident = static_cast<uint64_t>(h.window_token_ids_size()) +
                            h.sink_token_ids_size() + h.mem_slots();
  out->set_resident_tokens(resident);
  out->set_kv_bytes_resident(resident * kv_bytes_per_token_);
  out->set_memory_block_bytes(h.payload_size());
  out->set_model_fingerprint(h.model_fingerprint());
  out->set_projector_fingerprint(h.projector_fingerprint());
  return absl::OkStatus();
}

grpc::Status InferenceServiceImpl::GetSession(grpc::ServerContext* context,
                                              const v1::GetSessionRequest* request,
                                              v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) return ToGrpcStatus(s);
  AnnotateSession(context, request->session_id());
  return ToGrpcStatus(DescribeSession(*caller, request->session_id(), response));
}

grpc::Status InferenceServiceImpl::ListSessions(grpc::ServerContext* context,
                                                const v1::ListSessionsRequest* request,
                                                v1::ListSessionsResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (request->page_size() > 1000) {
    return ToGrpcStatus(absl::InvalidArgumentError("page_size must be <= 1000"));
  }
  auto page = deps_.store->ListSessions(caller->store_credential, request->page_size(),
                                        request->page_token());
  if (!page.ok()) return ToGrpcStatus(StoreError(page.status()));
  for (const v1::SessionInfo& info : page->sessions()) {
    v1::Session* s = response->add_sessions();
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
  response->set_next_page_token(page->next_page_token());
  if (page->has_usage()) *response->mutable_usage() = page->usage();
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::DeleteSession(grpc::ServerContext* context,
                                                 const v1::DeleteSessionRequest* request,
                                                 v1::DeleteSessionResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) return ToGrpcStatus(s);
  AnnotateSession(context, request->session_id());
  auto deleted = deps_.store->Delete(caller->store_credential, request->session_id());
  deps_.runtime->Forget(*caller, request->session_id());
  if (!deleted.ok()) return ToGrpcStatus(StoreError(deleted.status()));
  response->set_versions_deleted(*deleted);
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::ForkSession(grpc::ServerContext* context,
                                               const v1::ForkSessionRequest* request,
                                               v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->source_session_id()); !s.ok()) {
    return ToGrpcStatus(s);
  }
  const std::string new_id =
      request->new_session_id().empty() ? NewSessionId() : request->new_session_id();
  if (absl::Status s = ValidateSessionId(new_id); !s.ok()) return ToGrpcStatus(s);
  AnnotateSession(context, new_id, request->version());
  auto forked = deps_.store->Fork(caller->store_credential, request->source_session_id(),
                                  request->version(), new_id);
  if (!forked.ok()) return ToGrpcStatus(StoreError(forked.status()));
  return ToGrpcStatus(DescribeSession(*caller, new_id, response));
}

grpc::Status InferenceServiceImpl::RollbackSession(grpc::ServerContext* context,
                                                   const v1::RollbackSessionRequest* request,
                                                   v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) return ToGrpcStatus(s);
  AnnotateSession(context, request->session_id(), request->version());
  if (request->version() == 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("version must be >= 1"));
  }
  auto info = deps_.store->SetHead(caller->store_credential, request->session_id(), request->version());
  // The cached copy is at another version now; the next Generate restores the new head.
  deps_.runtime->Forget(*caller, request->session_id());
  if (!info.ok()) return ToGrpcStatus(StoreError(info.status()));
  return ToGrpcStatus(DescribeSession(*caller, request->session_id(), response));
}

grpc::Status InferenceServiceImpl::EstimateKvCache(grpc::ServerContext* context,
                                                   const v1::EstimateKvCacheRequest* request,
                                                   v1::EstimateKvCacheResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  auto estimate = planner::EstimateKvCache(*request, &served_spec_);
  if (!estimate.ok()) return ToGrpcStatus(estimate.status());
  *response = std::move(*estimate);
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::GetModelInfo(grpc::ServerContext* context,
                                                const v1::GetModelInfoRequest* request,
                                                v1::ModelInfo* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const model::ModelConfig& c = deps_.engine->config();
  response->set_name(config_.model_path);
  response->set_architecture(c.architecture);
  response->set_model_fingerprint(deps_.engine->fingerprint());
  response->set_hidden_size(c.hidden_size);
  response->set_num_layers(c.num_layers);
  response->set_num_heads(c.num_heads);
  response->set_num_kv_heads(c.num_kv_heads);
  response->set_head_dim(c.head_dim);
  response->set_vocab_size(c.vocab_size);
  response->set_max_position_embeddings(c.max_position_embeddings);
  if (deps_.projector != nullptr) {
    response->set_projector_fingerprint(deps_.projector_fingerprint);
    response->set_mem_slots(deps_.projector->config().mem_slots);
    response->set_window_size(deps_.projector->config().window_size);
    response->set_chunk_size(deps_.projector->config().chunk_size);
  } else {
    response->set_window_size(config_.default_window ? config_.default_window : 1024);
  }
  response->set_backend(deps_.engine->backend().Name());
  response->set_kv_bytes_per_token(kv_bytes_per_token_);
  response->set_default_mode(KvModeToProto(config_.default_mode));
  return grpc::Status::OK;
}

}  // namespace kvfold::service
