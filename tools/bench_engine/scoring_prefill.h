// What scoring a prompt costs (an echoed prompt with log-probabilities, docs/http-api.md
// "Scoring a prompt"): a full-mode prompt of `tokens` ids prefilled whole, plain and with
// Session::ObservePrefillRows computing each row's engine::ComputeLogprobs (5
// alternatives), the two alternated `reps` times on fresh sessions. Medians in tokens per
// second, and scored over plain.
#ifndef KVFOLD_TOOLS_BENCH_ENGINE_SCORING_PREFILL_H_
#define KVFOLD_TOOLS_BENCH_ENGINE_SCORING_PREFILL_H_

#include "inference_svc/engine/engine.h"
#include "nlohmann/json.hpp"

namespace kvfold::bench {

// {"tokens", "reps", "plain_tok_s", "scored_tok_s", "scored_over_plain"} or {"error": ...}.
nlohmann::json BenchScoringPrefill(engine::Engine& engine, int tokens, int reps);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_ENGINE_SCORING_PREFILL_H_
