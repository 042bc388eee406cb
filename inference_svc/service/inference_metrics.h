// InferenceMetrics: the kvfold_inference_* series of one replica, registered in a
// metrics::Registry that both fronts (gRPC and the OpenAI HTTP front) report into and that
// the replica's /metrics page renders. Names, labels and meanings: docs/observability.md.
//
// Every method is thread-safe and, except the first use of a new label value, lock-free
// and allocation-free (series are looked up once and cached).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_METRICS_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "inference_svc/runtime/runtime.h"

namespace kvfold::service {

// What a finished turn reports (Usage fields of the final Generate message).
struct TurnMetrics {
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t folded_tokens = 0;
  double ttft_seconds = 0;    // call start -> first generated token (0: none generated)
  double decode_seconds = 0;  // first generated token -> last
};

enum class RestoreSource { kCache, kStore };

// Which front served a request (label `front`: "grpc" or "http").
enum class Front { kGrpc, kHttp };

// Admission outcomes, as the label `decision` spells them: the turn got its KV reservation,
// or was refused with a retry-after hint (the pool is full now).
enum class AdmissionDecision { kAdmit, kReject };

class InferenceMetrics {
 public:
  // Registers every series (so a fresh replica's page already lists them at 0).
  explicit InferenceMetrics(metrics::Registry* registry);

  // A finished call on either front: kvfold_inference_requests_total{front,code} (code: the
  // canonical name, absl::StatusCodeToString: "OK", "RESOURCE_EXHAUSTED", ...) and
  // kvfold_inference_request_seconds{front}.
  void RequestDone(Front front, absl::StatusCode code, double seconds);
  // A turn that generated: TTFT, inter-token time (decode time spread evenly over the
  // generated tokens after the first: the histogram's _sum/_count is the exact mean) and
  // the token counters.
  void TurnDone(const TurnMetrics& turn);
  void Restored(RestoreSource source);
  void Admission(AdmissionDecision decision);
  // All of the above from a runtime turn's outcome (TurnHandle::Finish, or StartTurn's
  // error): what a front calls once per turn. A finished turn counts as admitted, restored
  // from the store or from this replica's cache, and its tokens and latencies; a
  // RESOURCE_EXHAUSTED with a retry-after hint counts as rejected; other errors count
  // nothing here (requests_total has them).
  void TurnFinished(const absl::StatusOr<runtime::TurnUsage>& outcome);

  // The gauges read at scrape time from the component that owns the value.
  void SetGaugeSources(std::function<double()> kv_pool_utilization,
                       std::function<double()> active_sessions,
                       std::function<double()> queue_depth);

  metrics::Registry& registry() { return *registry_; }

 private:
  metrics::Counter* RequestCounter(Front front, absl::StatusCode code);

  static constexpr int kNumCodes = 17;  // absl::StatusCode 0..16
  metrics::Registry* registry_;
  std::array<metrics::Histogram*, 2> request_seconds_;
  // Looked up on a code's first use (a page lists only the codes that happened).
  std::array<std::atomic<metrics::Counter*>, 2 * kNumCodes> requests_{};
  metrics::Histogram* ttft_;
  metrics::Histogram* inter_token_;
  metrics::Counter* prompt_tokens_;
  metrics::Counter* generated_tokens_;
  metrics::Counter* folded_tokens_;
  std::array<metrics::Counter*, 2> restores_;
  std::array<metrics::Counter*, 2> admission_;
};

// A turn's phases for the request log, in the order both fronts write them: "ttft",
// "queue", "restore", "prefill", "decode", "fold", "checkpoint", "total" (milliseconds).
std::vector<std::pair<std::string, double>> TurnTimingsMs(const runtime::TurnUsage& usage);

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_METRICS_H_
