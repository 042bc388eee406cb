// Batched decode in the engine alone (no service): N sequences, each holding a short
// prompt, advance one token per step in one ragged Forward of N rows, greedy argmax per
// row (what the scheduler's decode step does, without gRPC). Sizes alternate round by
// round (1, 16, 1, 16, ...) so load noise on a shared machine hits all of them alike;
// the figure per size is the median round, per wall and per CPU second, and
// `over_one` = N rows' tokens per CPU second / one row's (docs/engine.md "Batched decode").
#ifndef KVFOLD_TOOLS_BENCH_ENGINE_BATCH_DECODE_H_
#define KVFOLD_TOOLS_BENCH_ENGINE_BATCH_DECODE_H_

#include <vector>

#include "inference_svc/engine/engine.h"
#include "nlohmann/json.hpp"

namespace kvfold::bench {

struct BatchDecodeOptions {
  std::vector<int> sizes = {1, 16};  // sequences per step
  int prompt_tokens = 8;             // each sequence's prompt (one ragged prefill)
  int steps = 32;                    // timed decode steps per round
  int rounds = 3;                    // rounds per size, interleaved
};

// {"sizes": [{"sequences", "decode_tok_s", "decode_tok_per_cpu_s", "ms_per_step",
// "cpu_ms_per_step", "over_one", "over_one_cpu"}...]} or {"error": ...}.
nlohmann::json BenchBatchDecode(engine::Engine& engine, const BatchDecodeOptions& options);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_ENGINE_BATCH_DECODE_H_
