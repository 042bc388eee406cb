// A minimal HTTP endpoint for Prometheus-style text metrics: GET /metrics on
// 127.0.0.1:<port> answers with whatever the callback returns. One thread, one request
// at a time (scrapes are rare and tiny).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_METRICS_HTTP_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_METRICS_HTTP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace kvfold::service {

class MetricsHttpServer {
 public:
  // port 0 picks a free port. Unavailable when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      int port, std::function<std::string()> render);
  ~MetricsHttpServer();
  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  void Loop();
  int listen_fd_ = -1;
  int port_ = 0;
  std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_METRICS_HTTP_H_
