// Request metrics for kvfold-memory and a tiny HTTP endpoint that serves them in the
// Prometheus text format (GET /metrics). Counters: requests by method and status code,
// payload bytes written and read, compare-and-set aborts; a latency histogram per method.
#ifndef KVFOLD_MEMORY_SVC_SERVICE_METRICS_H_
#define KVFOLD_MEMORY_SVC_SERVICE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kvfold::memory_svc {

class Metrics {
 public:
  // Upper bounds (seconds) of the latency histogram buckets; +Inf is implicit.
  static constexpr std::array<double, 12> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,   0.1,   0.25,   0.5,   1.0,  2.5};

  // One finished call. bytes_in/bytes_out: payload bytes accepted / served.
  void Record(const std::string& method, absl::StatusCode code, double seconds,
              uint64_t bytes_in, uint64_t bytes_out);
  std::string RenderPrometheus() const;
  // Appends `source()`'s Prometheus text (e.g. tenant quota gauges) to every rendering.
  // Call before serving; `source` must be thread-safe.
  void SetExtraSource(std::function<std::string()> source) { extra_ = std::move(source); }

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> counts{};  // non-cumulative; summed on render
    uint64_t count = 0;
    double sum = 0;
  };
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Histogram> latency_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_read_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t aborts_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<std::string()> extra_;
};

// Serves `metrics` on 0.0.0.0:port over HTTP/1.0 (one request per connection) until
// destroyed. port 0 picks a free port (see port()).
class MetricsHttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const Metrics* metrics,
                                                                   int port);
  ~MetricsHttpServer();
  int port() const { return port_; }

 private:
  MetricsHttpServer(const Metrics* metrics, int fd, int port);
  void Serve();

  const Metrics* metrics_;
  int fd_;
  int port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_SERVICE_METRICS_H_
