// InferenceServer: builds everything a replica runs from a ServiceConfig (backend, model,
// tokenizer, chat template, projector, engine, store gateway, runtime, gRPC server with
// health and reflection, optional metrics endpoint and OpenAI-compatible HTTP API) and owns
// it. service_main.cc is flags + this.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_SERVER_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "common/auth.h"
#include "common/grpc_request_log.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "common/request_log.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/http/openai_front.h"

#include "inference_svc/memory/projector.h"
#include "inference_svc/service/inference_metrics.h"
#include "inference_svc/service/inference_service.h"
#include "inference_svc/service/http_turn_port.h"
#include "inference_svc/runtime/runtime.h"
#include "inference_svc/service/service_config.h"
#include "inference_svc/service/store_gateway.h"
#include "inference_svc/service/store_sessions.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "kernels/backend.h"

namespace kvfold::service {

class InferenceServer {
 public:
  // Loads the model (NotFound/InvalidArgument from the loaders), the projector
  // (FailedPrecondition when made for another model), starts the scheduler and the gRPC
  // server (Unavailable when the address cannot be bound, also when another process
  // listens on it: SO_REUSEPORT is off). The store need not be up:
  // health stays NOT_SERVING until it answers.
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Start(const ServiceConfig& config);
  ~InferenceServer();

  // "127.0.0.1:<bound port>".
  const std::string& address() const { return address_; }
  // The HTTP API's bound port; 0 when it is off.
  int http_port() const { return http_front_ != nullptr ? http_front_->port() : 0; }
  size_t http_open_connections() const {
    return http_front_ != nullptr ? http_front_->server().open_connections() : 0;
  }
  // The chat template of the served model; null without a tokenizer.
  const ChatTemplate* chat_template() const { return chat_template_.get(); }
  InferenceServiceImpl& service() { return *service_; }
  runtime::Runtime& runtime() { return *runtime_; }
  engine::Engine& engine() { return *engine_; }

  // The replica's metrics: the registry /metrics renders (other fronts register into it
  // and report with metrics()) and the kvfold_inference_* series.
  metrics::Registry& metrics_registry() { return registry_; }
  InferenceMetrics& metrics() { return *inference_metrics_; }
  // The request log every front writes its lines to.
  logging::RequestLogger& request_logger() { return *logger_; }
  // "HOST:PORT" of /metrics; "" when config.metrics_listen is empty.
  std::string metrics_address() const { return metrics_http_ ? metrics_http_->address() : ""; }
  // True from the first moment of a drain (Shutdown): other fronts report not-ready too.
  bool draining() const { return stopping_.load(); }
  // OK when the replica is ready for traffic (what health reports as SERVING): the store
  // answers and, with config.kv_populate, the KV pool is backed; else Unavailable naming
  // what it waits for.
  absl::Status Readiness() const;

  // Re-reads the tokens file (SIGHUP); the tokens in force stay when it fails to parse.
  // OK without a tokens file.
  absl::Status ReloadAuth() { return tokens_ ? tokens_->Reload() : absl::OkStatus(); }

  // Graceful stop, in the order Kubernetes needs: health turns NOT_SERVING at once; calls
  // are still accepted and served for config.drain_delay_s (endpoints are being removed);
  // then new calls are refused, turns in flight get config.drain_timeout_s to finish and
  // checkpoint (then they are cancelled), the scheduler stops. Idempotent; blocks.
  void Shutdown();

 private:
  InferenceServer() = default;
  void HealthLoop();
  // Backs the KV pool (engine::BlockPool::PopulateAll); stops early on Shutdown.
  void PopulateLoop();
  void RegisterReplicaMetrics();

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
  metrics::Registry registry_;
  std::unique_ptr<InferenceMetrics> inference_metrics_;
  std::unique_ptr<logging::RequestLogger> logger_;
  std::unique_ptr<logging::GrpcRequestLog> request_log_;
  std::unique_ptr<metrics::MetricsHttpServer> metrics_http_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::unique_ptr<RuntimeTurnPort> http_port_;
  std::unique_ptr<http::OpenAiFront> http_front_;
  std::string address_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> serving_{false};
  std::atomic<bool> store_ok_{false};
  std::thread health_thread_;
  std::thread populate_thread_;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_SERVER_H_
