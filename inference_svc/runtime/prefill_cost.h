// PrefillCostModel: predicts what a prompt chunk will cost from what earlier chunks cost,
// so the scheduler can size chunks to a time budget (docs/service.md, "The scheduler").
//
// A chunk of k tokens entering a session that holds p entries costs about
//   k * (a + b * (p + k / 2))   ms
// a per token for the weights, b per token and entry attended (row j of the chunk attends
// the p entries before the chunk and j of its own). a and b are fitted by least squares to
// the per-token cost of recent chunks (older chunks are forgotten geometrically, and one
// slow outlier counts as at most twice the prediction), so the model follows the
// machine's speed as it changes. Scheduler thread only.
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_PREFILL_COST_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_PREFILL_COST_H_

#include <cstdint>

namespace kvfold::runtime {

class PrefillCostModel {
 public:
  // Records that `tokens` (>= 1) entering a session of `resident` entries took `ms`.
  void Observe(int64_t resident, int64_t tokens, double ms);

  // True once two chunks at different spans were seen (a and b are both determined).
  bool ready() const;

  // Predicted ms of `tokens` entering a session of `resident` entries; requires ready().
  double PredictMs(int64_t resident, int64_t tokens) const;

  // The most tokens, in [0, max_tokens], whose predicted cost stays within `budget_ms`.
  // Requires ready().
  int64_t TokensWithin(int64_t resident, double budget_ms, int64_t max_tokens) const;

 private:
  struct Fit {
    double a = 0, b = 0;
  };
  Fit Solve() const;

  // Sums of the weighted least squares of ms-per-token (y) on the mean span (x).
  double sw_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  double min_x_ = 0, max_x_ = 0;
  int64_t observations_ = 0;
};

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_PREFILL_COST_H_
