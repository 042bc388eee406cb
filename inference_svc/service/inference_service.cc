// InferenceServiceImpl: shared helpers and the unary RPCs. Generate: service_generate.cc.
#include "inference_svc/service/inference_service.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/proto_enums.h"
#include "inference_svc/planner/planner_proto.h"
#include "inference_svc/service/proto_convert.h"
#include "inference_svc/service/session_admin.h"
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
      served_spec_(SpecOf(deps.engine->config())),
      sessions_(deps.runtime, deps.store, kv_bytes_per_token_) {}

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
  absl::Status s = sessions_.Create(*caller, *request, response);
  AnnotateSession(context, s.ok() ? response->session_id() : request->session_id());
  return ToGrpcStatus(s);
}

grpc::Status InferenceServiceImpl::GetSession(grpc::ServerContext* context,
                                              const v1::GetSessionRequest* request,
                                              v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  AnnotateSession(context, request->session_id());
  return ToGrpcStatus(sessions_.Get(*caller, request->session_id(), response));
}

grpc::Status InferenceServiceImpl::ListSessions(grpc::ServerContext* context,
                                                const v1::ListSessionsRequest* request,
                                                v1::ListSessionsResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(sessions_.List(*caller, *request, response));
}

grpc::Status InferenceServiceImpl::DeleteSession(grpc::ServerContext* context,
                                                 const v1::DeleteSessionRequest* request,
                                                 v1::DeleteSessionResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  AnnotateSession(context, request->session_id());
  return ToGrpcStatus(sessions_.Delete(*caller, request->session_id(), response));
}

grpc::Status InferenceServiceImpl::ForkSession(grpc::ServerContext* context,
                                               const v1::ForkSessionRequest* request,
                                               v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::Status s = sessions_.Fork(*caller, *request, response);
  AnnotateSession(context, s.ok() ? response->session_id() : request->new_session_id(),
                  request->version());
  return ToGrpcStatus(s);
}

grpc::Status InferenceServiceImpl::RollbackSession(grpc::ServerContext* context,
                                                   const v1::RollbackSessionRequest* request,
                                                   v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  AnnotateSession(context, request->session_id(), request->version());
  return ToGrpcStatus(sessions_.Rollback(*caller, *request, response));
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
