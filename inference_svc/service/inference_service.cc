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
  return ToGrpcStatus(Describe(*caller, session_id, response));
}

absl::Status InferenceServiceImpl::Describe(const runtime::Caller& caller,
                                            const std::string& session_id, v1::Session* out) {
  return DescribeStoredSession(*deps_.store, caller.store_credential, session_id,
                               kv_bytes_per_token_, out);
}

grpc::Status InferenceServiceImpl::GetSession(grpc::ServerContext* context,
                                              const v1::GetSessionRequest* request,
                                              v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) return ToGrpcStatus(s);
  AnnotateSession(context, request->session_id());
  return ToGrpcStatus(Describe(*caller, request->session_id(), response));
}

grpc::Status InferenceServiceImpl::ListSessions(grpc::ServerContext* context,
                                                const v1::ListSessionsRequest* request,
                                                v1::ListSessionsResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(ListStoredSessions(*deps_.store, caller->store_credential,
                                         request->page_size(), request->page_token(),
                                         kv_bytes_per_token_, response));
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
  return ToGrpcStatus(Describe(*caller, new_id, response));
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
  return ToGrpcStatus(Describe(*caller, request->session_id(), response));
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
