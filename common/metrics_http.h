// A minimal HTTP endpoint for Prometheus text metrics: GET /metrics on a configurable
// address answers with whatever the render callback returns (Content-Type
// text/plain; version=0.0.4). GET /readyz answers 200 while the `ready` callback returns
// true and 503 otherwise (a readiness probe for servers whose gRPC port speaks TLS, which
// Kubernetes' gRPC probe cannot); GET /livez always 200. Every other path answers 404.
// One request per connection, each connection on a thread of its own (at most
// kMaxClients at once; more are closed unanswered), so a client that connects and says
// nothing holds up only itself, for at most 2 s. When no thread can be started (a
// container at its pid limit) the connection is served on the accepting thread.
#ifndef KVFOLD_COMMON_METRICS_HTTP_H_
#define KVFOLD_COMMON_METRICS_HTTP_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace kvfold::metrics {

class MetricsHttpServer {
 public:
  // `listen` is "HOST:PORT" with a numeric host: "0.0.0.0:9091" (all IPv4 interfaces, what a
  // pod needs), "127.0.0.1:0" (loopback, any free port), "[::]:9091". InvalidArgument for a
  // malformed address, Unavailable when it cannot be bound.
  // `ready` may be empty: /readyz then always answers 200.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::function<std::string()> render,
      std::function<bool()> ready = nullptr);
  ~MetricsHttpServer();
  int port() const { return port_; }
  // "HOST:<bound port>".
  const std::string& address() const { return address_; }

 private:
  // Connections being served; shared with their threads, which may end after the server.
  struct Clients {
    std::mutex mu;
    std::condition_variable idle;
    int active = 0;
  };
  static constexpr int kMaxClients = 64;

  MetricsHttpServer() = default;
  void Loop();
  void Serve(int client);
  int listen_fd_ = -1;
  int port_ = 0;
  std::string address_;
  std::function<std::string()> render_;
  std::function<bool()> ready_;
  std::atomic<bool> stop_{false};
  std::shared_ptr<Clients> clients_ = std::make_shared<Clients>();
  std::thread thread_;
};

}  // namespace kvfold::metrics

#endif  // KVFOLD_COMMON_METRICS_HTTP_H_
