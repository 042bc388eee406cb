// InferenceServiceImpl: the gRPC InferenceService of a kvfold-inference replica.
//
// A thin adapter (synchronous gRPC handlers): authenticate, translate the request to the
// runtime (inference_svc/runtime/runtime.h: turns, sessions, admission, checkpoints) and its
// results back to protobuf. Session metadata calls (get, list, fork, rollback, delete) go
// to the store gateway. No engine work runs on a handler thread. Status codes:
// proto/kvfold/v1/inference.proto and docs/api.md; behaviour: docs/service.md.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_SERVICE_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_SERVICE_H_

#include <grpcpp/server_context.h>

#include <atomic>
#include <memory>
#include <string>

#include "common/auth.h"
#include "common/grpc_request_log.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/planner/model_spec.h"
#include "inference_svc/runtime/runtime.h"
#include "inference_svc/service/inference_metrics.h"
#include "inference_svc/service/service_config.h"
#include "inference_svc/service/session_admin.h"
#include "inference_svc/service/store_gateway.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "kvfold/v1/inference.grpc.pb.h"

namespace kvfold::service {

// Everything a service instance uses; all must outlive it. tokenizer, projector and
// tokens may be null (no text prompts / no memory modes / auth off).
struct ServiceDeps {
  const ServiceConfig* config = nullptr;
  engine::Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // with tokenizer: how calls are written
  const memory::Projector* projector = nullptr;
  std::string projector_fingerprint;
  runtime::Runtime* runtime = nullptr;
  StoreGateway* store = nullptr;
  const TokenTable* tokens = nullptr;
  // Observability; either may be null (tests that build a service without a server).
  InferenceMetrics* metrics = nullptr;
  logging::GrpcRequestLog* request_log = nullptr;
};

class InferenceServiceImpl final : public v1::InferenceService::Service {
 public:
  explicit InferenceServiceImpl(const ServiceDeps& deps);

  // After this, every new call is UNAVAILABLE ("draining"); calls in flight continue.
  void StartDraining() { draining_.store(true); }

  grpc::Status CreateSession(grpc::ServerContext* context, const v1::CreateSessionRequest* request,
                             v1::Session* response) override;
  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GetSession(grpc::ServerContext* context, const v1::GetSessionRequest* request,
                          v1::Session* response) override;
  grpc::Status ListSessions(grpc::ServerContext* context, const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  grpc::Status DeleteSession(grpc::ServerContext* context, const v1::DeleteSessionRequest* request,
                             v1::DeleteSessionResponse* response) override;
  grpc::Status ForkSession(grpc::ServerContext* context, const v1::ForkSessionRequest* request,
                           v1::Session* response) override;
  grpc::Status RollbackSession(grpc::ServerContext* context,
                               const v1::RollbackSessionRequest* request,
                               v1::Session* response) override;
  grpc::Status EstimateKvCache(grpc::ServerContext* context,
                               const v1::EstimateKvCacheRequest* request,
                               v1::EstimateKvCacheResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;

  // KV bytes one token adds on this replica's engine (all layers, K and V).
  uint64_t kv_bytes_per_token() const { return kv_bytes_per_token_; }
  const std::string& replica_name() const { return replica_name_; }
  // Called once before serving (the bound address, when no --replica-name was given).
  void set_replica_name(const std::string& name) { replica_name_ = name; }

 private:
  // The caller's local tenant and the credential forwarded to the store.
  absl::StatusOr<runtime::Caller> Authenticate(const grpc::ServerContext& context) const;
  // Observability (service_observe.cc): fields of the call's request-log line; a turn's
  // outcome into the metrics and the log line.
  void Annotate(const grpc::ServerContext* context,
                const std::function<void(logging::RequestRecord*)>& fill) const;
  void ReportTurn(const grpc::ServerContext* context,
                  const absl::StatusOr<runtime::TurnUsage>& outcome) const;
  // The session (and version, when the call names one) of a metadata RPC's log line.
  void AnnotateSession(const grpc::ServerContext* context, const std::string& session_id,
                       uint64_t version = 0) const;

  const ServiceDeps deps_;
  const ServiceConfig& config_;
  std::string replica_name_;
  const uint64_t kv_bytes_per_token_;
  planner::ModelSpec served_spec_;
  const SessionAdmin sessions_;
  std::atomic<bool> draining_{false};
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_SERVICE_H_
