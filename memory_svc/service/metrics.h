// kvfold-memory's request metrics, in the process's one metrics::Registry (common/metrics.h;
// served by metrics::MetricsHttpServer on --metrics-port): requests by method and status
// code, payload bytes written and read, compare-and-set aborts, a latency histogram per
// method; the transfer budget's and the stream watchdog's series are added by the server.
#ifndef KVFOLD_MEMORY_SVC_SERVICE_METRICS_H_
#define KVFOLD_MEMORY_SVC_SERVICE_METRICS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics.h"

namespace kvfold::memory_svc {

class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Upper bounds (seconds) of the latency histogram buckets; +Inf is implicit.
  static const std::vector<double>& Buckets();

  // One finished call. bytes_in/bytes_out: payload bytes accepted / served.
  void Record(const std::string& method, absl::StatusCode code, double seconds,
              uint64_t bytes_in, uint64_t bytes_out);
  // The registry, for series other components add (callback gauges).
  metrics::Registry& registry() { return registry_; }
  // The /metrics page: the registry, then `extra` (the tenant quota gauges, whose tenant
  // labels come and go with the tenants file).
  std::string Render() const;
  // Call before serving; `extra` must be thread-safe.
  void SetExtraSource(std::function<std::string()> extra) { extra_ = std::move(extra); }

 private:
  metrics::Registry registry_;
  metrics::Counter& bytes_written_;
  metrics::Counter& bytes_read_;
  metrics::Counter& aborts_;
  std::function<std::string()> extra_;
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_SERVICE_METRICS_H_
