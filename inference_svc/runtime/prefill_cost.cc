#include "inference_svc/runtime/prefill_cost.h"

#include <algorithm>
#include <cmath>

namespace kvfold::runtime {
namespace {

// Weight kept by the older chunks at each new one: the fit follows the last ~50 chunks.
constexpr double kForget = 0.98;
constexpr double kMaxStep = 2.0;

double MeanSpan(int64_t resident, int64_t tokens) {
  return static_cast<double>(resident) + 0.5 * static_cast<double>(tokens);
}

}  // namespace

void PrefillCostModel::Observe(int64_t resident, int64_t tokens, double ms) {
  if (tokens <= 0 || !(ms >= 0) || !std::isfinite(ms)) return;
  const double x = MeanSpan(resident, tokens);
  double y = ms / static_cast<double>(tokens);
  // A chunk the OS preempted (or a page fault) reads far slower than the engine is: such
  // an outlier moves the fit by at most kMaxStep of the prediction per chunk, while a
  // machine that really slowed down is followed within a few chunks.
  if (ready()) y = std::min(y, kMaxStep * PredictMs(resident, tokens) / static_cast<double>(tokens));
  sw_ = kForget * sw_ + 1;
  sx_ = kForget * sx_ + x;
  sy_ = kForget * sy_ + y;
  sxx_ = kForget * sxx_ + x * x;
  sxy_ = kForget * sxy_ + x * y;
  min_x_ = observations_ == 0 ? x : std::min(min_x_, x);
  max_x_ = observations_ == 0 ? x : std::max(max_x_, x);
  ++observations_;
}

bool PrefillCostModel::ready() const { return observations_ >= 2 && max_x_ > min_x_; }

PrefillCostModel::Fit PrefillCostModel::Solve() const {
  Fit f;
  const double det = sw_ * sxx_ - sx_ * sx_;
  if (det > 1e-9 * sw_ * sxx_) {
    f.b = (sw_ * sxy_ - sx_ * sy_) / det;
    f.a = (sy_ - f.b * sx_) / sw_;
  } else {
    f.a = sy_ / sw_;  // every chunk at one span: no slope to fit
  }
  // Costs never fall with the span, and never go below zero: clamp to the nearest
  // one-parameter fit.
  if (f.b < 0) {
    f.b = 0;
    f.a = sy_ / sw_;
  } else if (f.a < 0) {
    f.a = 0;
    f.b = sxx_ > 0 ? sxy_ / sxx_ : 0;
  }
  return f;
}

double PrefillCostModel::PredictMs(int64_t resident, int64_t tokens) const {
  const Fit f = Solve();
  return static_cast<double>(tokens) * (f.a + f.b * MeanSpan(resident, tokens));
}

int64_t PrefillCostModel::TokensWithin(int64_t resident, double budget_ms,
                                       int64_t max_tokens) const {
  if (!(budget_ms > 0) || max_tokens <= 0) return 0;
  const Fit f = Solve();
  // k (a + b p) + (b / 2) k^2 <= budget.
  const double linear = f.a + f.b * static_cast<double>(resident);
  double k = 0;
  if (f.b > 0) {
    k = (-linear + std::sqrt(linear * linear + 2 * f.b * budget_ms)) / f.b;
  } else {
    k = linear > 0 ? budget_ms / linear : static_cast<double>(max_tokens);
  }
  return std::clamp<int64_t>(static_cast<int64_t>(std::floor(k)), 0, max_tokens);
}

}  // namespace kvfold::runtime
