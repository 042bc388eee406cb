// Admission control for the inference service: a pure function of the KV pool's projected
// utilisation. The service calls Admit() before it starts (or continues) a request and
// applies the returned adjustments; the planner uses the same thresholds for capacity.
//
// Utilisation u = (used_bytes + requested_bytes) / pool_bytes, compared exactly in integer
// basis points (1 bp = 0.01 %). Tiers, each boundary belonging to the tier above it:
//   u <  70 %        admit unchanged
//   70 % <= u < 85 % admit; max_new_tokens halved (rounded down, at least 1); warning
//   85 % <= u < 95 % as above, and num_beams forced to 1 and reusable cache not retained
//   u >= 95 %        reject: RESOURCE_EXHAUSTED with a retry-after hint
// A zero pool rejects everything (nothing fits).
#ifndef KVFOLD_INFERENCE_SVC_PLANNER_ADMISSION_H_
#define KVFOLD_INFERENCE_SVC_PLANNER_ADMISSION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace kvfold::planner {

struct AdmissionPolicy {
  uint32_t degrade_bp = 7000;      // from here: halve max_new_tokens.  Default: 70 %
  uint32_t single_beam_bp = 8500;  // from here: num_beams = 1, no cache retention. Default: 85 %
  uint32_t reject_bp = 9500;       // from here: reject.                Default: 95 %
  // Retry-after hint for rejections; doubled when the pool is over-committed
  // (u >= 100 %), because requests in flight must finish first. Default: 1000 ms.
  uint32_t retry_after_ms = 1000;
};

enum class AdmissionTier { kAdmit, kDegraded, kSingleBeam, kReject };

struct AdmissionRequest {
  uint64_t pool_bytes = 0;       // the KV pool (planner: gpu - weights - reserve)
  uint64_t used_bytes = 0;       // bytes reserved by sessions already admitted
  uint64_t requested_bytes = 0;  // this request's reservation (0: judge current usage)
  uint32_t max_new_tokens = 0;   // as resolved by the service (> 0)
  uint32_t num_beams = 1;
  bool retain_reusable_cache = true;  // keep the session's KV hot after the turn
};

struct AdmissionDecision {
  AdmissionTier tier = AdmissionTier::kAdmit;
  bool admitted = true;
  uint64_t utilization_bp = 0;  // projected utilisation, basis points (saturates)
  uint32_t max_new_tokens = 0;  // adjusted
  uint32_t num_beams = 1;       // adjusted
  bool retain_reusable_cache = true;
  uint32_t retry_after_ms = 0;  // > 0 only when rejected
  std::string warning;          // non-empty from the 70 % tier on (and on rejection)
};

// Pure; never fails. Thresholds must satisfy degrade <= single_beam <= reject (CHECKed by
// ValidateAdmissionPolicy, not here).
AdmissionDecision Admit(const AdmissionRequest& request,
                        const AdmissionPolicy& policy = AdmissionPolicy());

// InvalidArgument unless 0 < degrade_bp <= single_beam_bp <= reject_bp <= 10000.
absl::Status ValidateAdmissionPolicy(const AdmissionPolicy& policy);

// OK when admitted; otherwise RESOURCE_EXHAUSTED whose message ends with
// "retry_after_ms=<n>" (the hint the client parses; the service may also send it as
// trailing metadata "retry-after-ms").
absl::Status AdmissionStatus(const AdmissionDecision& decision);

// Number of sessions of `session_bytes` each that stay strictly below `threshold_bp` of
// `pool_bytes`: the largest n with n * session_bytes < pool_bytes * threshold_bp / 10000.
// 0 when session_bytes is 0 or the pool is empty.
uint64_t SessionsBelow(uint64_t pool_bytes, uint64_t session_bytes, uint32_t threshold_bp);

}  // namespace kvfold::planner

#endif  // KVFOLD_INFERENCE_SVC_PLANNER_ADMISSION_H_
