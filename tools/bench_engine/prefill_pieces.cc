#include "tools/bench_engine/prefill_pieces.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "inference_svc/engine/session.h"

namespace kvfold::bench {
namespace {

using Clock = std::chrono::steady_clock;

nlohmann::json Band(int64_t context_to, std::vector<double>& ms) {
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double x : ms) sum += x;
  const size_t n = ms.size();
  return {{"context_to", context_to},
          {"pieces", n},
          {"p50_ms", ms[n / 2]},
          {"p99_ms", ms[std::min(n - 1, n * 99 / 100)]},
          {"max_ms", ms.back()},
          {"mean_ms", sum / static_cast<double>(n)}};
}

}  // namespace

nlohmann::json BenchPrefillPieces(engine::Engine& engine, int tokens, int band) {
  if (tokens <= 0 || band <= 0) return {{"error", "prefill pieces need tokens and band > 0"}};
  engine::SessionOptions options;
  options.mode = engine::KvMode::kFull;
  auto session = engine::CreatePlainSession(&engine, options);
  if (!session.ok()) return {{"error", session.status().ToString()}};
  const int vocab = engine.config().vocab_size;
  std::vector<int32_t> ids(tokens);
  for (int t = 0; t < tokens; ++t) ids[t] = 1 + static_cast<int32_t>((t * 7919LL) % (vocab - 1));
  if (absl::Status s = (*session)->StartPrefill(ids); !s.ok()) return {{"error", s.ToString()}};
  nlohmann::json bands = nlohmann::json::array();
  std::vector<double> ms;
  int64_t band_end = band;
  const auto start = Clock::now();
  for (bool done = false; !done;) {
    const auto t0 = Clock::now();
    absl::StatusOr<bool> r = (*session)->ContinuePrefill(0.0);  // one piece
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!r.ok()) return {{"error", r.status().ToString()}};
    done = *r;
    const int64_t resident = (*session)->ResidentTokens();
    // The last band runs to the end of the prompt (its last sub-chunk's layers).
    if ((resident >= band_end && resident < tokens) || done) {
      bands.push_back(Band(resident, ms));
      ms.clear();
      while (band_end <= resident) band_end += band;
    }
  }
  return {{"tokens", tokens},
          {"band", band},
          {"seconds", std::chrono::duration<double>(Clock::now() - start).count()},
          {"bands", bands}};
}

}  // namespace kvfold::bench
