#include "memory_svc/service/metrics.h"

namespace kvfold::memory_svc {

const std::vector<double>& Metrics::Buckets() {
  static const std::vector<double> buckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                              0.05,   0.1,   0.25,   0.5,   1.0,  2.5};
  return buckets;
}

Metrics::Metrics()
    : bytes_written_(registry_.GetCounter("kvfold_memory_payload_bytes_written_total",
                                          "Committed payload bytes.")),
      bytes_read_(
          registry_.GetCounter("kvfold_memory_payload_bytes_read_total", "Served payload bytes.")),
      aborts_(registry_.GetCounter("kvfold_memory_cas_aborts_total", "Compare-and-set losses.")) {}

void Metrics::Record(const std::string& method, absl::StatusCode code, double seconds,
                     uint64_t bytes_in, uint64_t bytes_out) {
  registry_
      .GetCounter("kvfold_memory_requests_total", "Finished RPCs by method and code.",
                  {{"method", method}, {"code", absl::StatusCodeToString(code)}})
      .Increment();
  registry_
      .GetHistogram("kvfold_memory_request_seconds", "RPC latency by method.", Buckets(),
                    {{"method", method}})
      .Observe(seconds);
  bytes_written_.Increment(static_cast<double>(bytes_in));
  bytes_read_.Increment(static_cast<double>(bytes_out));
  if (code == absl::StatusCode::kAborted) aborts_.Increment();
}

std::string Metrics::Render() const {
  std::string page = registry_.Render();
  if (extra_) page += extra_();
  return page;
}

}  // namespace kvfold::memory_svc
