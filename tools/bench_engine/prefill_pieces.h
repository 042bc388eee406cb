// How long the units of a long prompt's work take: a full-mode prompt fed through
// Session::StartPrefill / ContinuePrefill one piece per call (what the scheduler runs
// between other sessions' decode steps, docs/service.md "The scheduler"), each piece
// timed. Per band of `band` context entries: pieces, p50, p99, max and mean ms. A piece
// should cost about the same at any context (the stall it adds to other sessions).
#ifndef KVFOLD_TOOLS_BENCH_ENGINE_PREFILL_PIECES_H_
#define KVFOLD_TOOLS_BENCH_ENGINE_PREFILL_PIECES_H_

#include "inference_svc/engine/engine.h"
#include "nlohmann/json.hpp"

namespace kvfold::bench {

// {"tokens", "band", "seconds", "bands": [{"context_to", "pieces", "p50_ms", "p99_ms",
// "max_ms", "mean_ms"}...]} or {"error": ...}.
nlohmann::json BenchPrefillPieces(engine::Engine& engine, int tokens, int band);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_ENGINE_PREFILL_PIECES_H_
