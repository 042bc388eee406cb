#include "tools/bench_engine/scoring_prefill.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "inference_svc/engine/sampler.h"
#include "inference_svc/engine/session.h"
#include "tools/bench_stats.h"

namespace kvfold::bench {

nlohmann::json BenchScoringPrefill(engine::Engine& engine, int tokens, int reps) {
  const int vocab = engine.config().vocab_size;
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int i = 0; i < tokens; ++i) ids[static_cast<size_t>(i)] = 1 + (i * 7919) % (vocab - 1);
  std::vector<double> plain, scored;
  engine::TokenLogprobs record;
  double checksum = 0;  // keeps the records' computation observable
  for (int rep = 0; rep < reps; ++rep) {
    for (const bool observe : {false, true}) {
      auto session = engine::CreatePlainSession(&engine, engine::SessionOptions());
      if (!session.ok()) return {{"error", session.status().ToString()}};
      size_t row = 0;
      if (observe) {
        (*session)->ObservePrefillRows([&](std::span<const float> logits) {
          const size_t next = std::min(++row, ids.size() - 1);
          engine::ComputeLogprobs(logits, ids[next], 5, &record);
          checksum += record.logprob;
        });
      }
      const auto t0 = std::chrono::steady_clock::now();
      if (absl::Status s = (*session)->Prefill(ids); !s.ok()) return {{"error", s.ToString()}};
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      (observe ? scored : plain).push_back(tokens / seconds);
    }
  }
  return {{"tokens", tokens},
          {"reps", reps},
          {"plain_tok_s", Median(plain)},
          {"scored_tok_s", Median(scored)},
          {"scored_over_plain", Median(scored) / Median(plain)},
          {"logprob_sum", checksum}};
}

}  // namespace kvfold::bench
