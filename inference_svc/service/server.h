// InferenceServer: builds everything a replica runs from a ServiceConfig (backend, model,
// tokenizer, projector, engine, store gateway, runtime, gRPC server with health and
// reflection, optional metrics endpoint) and owns it. service_main.cc is flags + this.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_SERVER_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "common/auth.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/service/inference_service.h"
#include "inference_svc/service/metrics_http.h"
#include "inference_svc/runtime/runtime.h"
#include "inference_svc/service/service_config.h"
#include "inference_svc/service/store_gateway.h"
#include "inference_svc/service/store_sessions.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "kernels/backend.h"

namespace kvfold::service {

class InferenceServer {
 public:
  // Loads the model (NotFound/InvalidArgument from the loaders), the projector
  // (FailedPrecondition when made for another model), starts the scheduler and the gRPC
  // server (Unavailable when the address cannot be bound). The store need not be up:
  // health stays NOT_SERVING until it answers.
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Start(const ServiceConfig& config);
  ~InferenceServer();

  // "127.0.0.1:<bound port>".
  const std::string& address() const { return address_; }
  InferenceServiceImpl& service() { return *service_; }
  runtime::Runtime& runtime() { return *runtime_; }
  engine::Engine& engine() { return *engine_; }

  // Graceful stop: refuse new calls, let turns in flight finish and checkpoint (up to
  // config.drain_timeout_s, then cancel them), stop the scheduler. Idempotent.
  void Shutdown();

 private:
  InferenceServer() = default;
  void HealthLoop();
  std::string MetricsText() const;

  ServiceConfig config_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<memory::Projector> projector_;
  std::unique_ptr<TokenTable> tokens_;
  std::unique_ptr<StoreGateway> store_;
  std::unique_ptr<StoreSessions> store_sessions_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<InferenceServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::string address_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> serving_{false};
  std::thread health_thread_;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_SERVER_H_
