#include "inference_svc/planner/admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvfold::planner {
namespace {

using u128 = unsigned __int128;

// (used + requested) / pool in basis points, rounded down; saturates at UINT64_MAX.
uint64_t UtilizationBp(const AdmissionRequest& r) {
  if (r.pool_bytes == 0) return UINT64_MAX;
  u128 bp = (static_cast<u128>(r.used_bytes) + r.requested_bytes) * 10000 / r.pool_bytes;
  return bp > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(bp);
}

// u >= threshold_bp / 10000, exactly: (used + requested) * 10000 >= threshold_bp * pool.
bool AtLeast(const AdmissionRequest& r, uint32_t threshold_bp) {
  if (r.pool_bytes == 0) return true;
  u128 lhs = (static_cast<u128>(r.used_bytes) + r.requested_bytes) * 10000;
  return lhs >= static_cast<u128>(threshold_bp) * r.pool_bytes;
}

std::string Percent(uint64_t bp) {
  if (bp == UINT64_MAX) return "inf";
  return absl::StrFormat("%d.%02d%%", bp / 100, bp % 100);
}

}  // namespace

AdmissionDecision Admit(const AdmissionRequest& r, const AdmissionPolicy& p) {
  AdmissionDecision d;
  d.utilization_bp = UtilizationBp(r);
  d.max_new_tokens = r.max_new_tokens;
  d.num_beams = r.num_beams;
  d.retain_reusable_cache = r.retain_reusable_cache;
  const std::string usage = absl::StrCat("KV pool at ", Percent(d.utilization_bp));

  if (AtLeast(r, p.reject_bp)) {
    d.tier = AdmissionTier::kReject;
    d.admitted = false;
    d.retry_after_ms = AtLeast(r, 10000) ? 2 * p.retry_after_ms : p.retry_after_ms;
    d.warning = absl::StrCat(usage, " (>= ", Percent(p.reject_bp), "): request rejected");
    return d;
  }
  if (AtLeast(r, p.degrade_bp)) {
    d.tier = AdmissionTier::kDegraded;
    d.max_new_tokens = std::max<uint32_t>(1, r.max_new_tokens / 2);
    d.warning = absl::StrCat(usage, " (>= ", Percent(p.degrade_bp), "): max_new_tokens ",
                             r.max_new_tokens, " -> ", d.max_new_tokens);
  }
  if (AtLeast(r, p.single_beam_bp)) {
    d.tier = AdmissionTier::kSingleBeam;
    d.num_beams = 1;
    d.retain_reusable_cache = false;
    absl::StrAppend(&d.warning, "; (>= ", Percent(p.single_beam_bp), "): num_beams ", r.num_beams,
                    " -> 1, reusable cache not retained");
  }
  return d;
}

absl::Status ValidateAdmissionPolicy(const AdmissionPolicy& p) {
  if (p.degrade_bp == 0 || p.degrade_bp > p.single_beam_bp || p.single_beam_bp > p.reject_bp ||
      p.reject_bp > 10000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "admission thresholds must satisfy 0 < degrade <= single_beam <= reject <= 100%, got ",
        Percent(p.degrade_bp), ", ", Percent(p.single_beam_bp), ", ", Percent(p.reject_bp)));
  }
  return absl::OkStatus();
}

absl::Status AdmissionStatus(const AdmissionDecision& d) {
  if (d.admitted) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(d.warning, "; retry_after_ms=", d.retry_after_ms));
}

uint64_t SessionsBelow(uint64_t pool_bytes, uint64_t session_bytes, uint32_t threshold_bp) {
  if (session_bytes == 0 || pool_bytes == 0 || threshold_bp == 0) return 0;
  // Largest n with n * session_bytes * 10000 < threshold_bp * pool_bytes.
  u128 limit = static_cast<u128>(threshold_bp) * pool_bytes;
  u128 per_session = static_cast<u128>(session_bytes) * 10000;
  u128 n = (limit - 1) / per_session;
  return n > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(n);
}

}  // namespace kvfold::planner
