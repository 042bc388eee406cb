// bench_service's fairness table: latency of short turns of other sessions while one
// session prefills a long full-mode prompt, against the same turns without it.
//
// `sessions` client threads run short turns (8-token prompt, 8 new tokens, full mode) in a
// loop. Each round measures them first alone (`turns` per session, for at least
// `alone_seconds`), then while one fresh
// session prefills a `long_prompt_tokens` prompt (until its turn ends): the two windows
// alternate, so load from other processes on the machine hits both alike. The short
// sessions are replaced every few turns, so their own context (at most ~140 tokens) is
// the same in both windows. Per round: p50/p99 at the client and the p99 ratio; overall:
// the median of the rounds' ratios, and the server's p50 and p99 of where a short turn's time
// went (queue, restore + prefill, decode, checkpoint, total).
#ifndef KVFOLD_TOOLS_BENCH_SERVICE_BENCH_FAIRNESS_H_
#define KVFOLD_TOOLS_BENCH_SERVICE_BENCH_FAIRNESS_H_

#include <nlohmann/json.hpp>

#include "inference_svc/service/server.h"

namespace kvfold::bench {

struct FairnessOptions {
  int long_prompt_tokens = 8000;
  int sessions = 4;
  int turns = 40;   // short turns per session in each window without the long prompt
  double alone_seconds = 0;  // ... and at least this long (a p99 over a short window
                             // is one burst of load from elsewhere away from noise)
  int rounds = 3;   // windows without / with the long prompt, alternating
};

// `server` runs without auth and admits full-mode prompts of long_prompt_tokens; `label`
// names the sessions (unique per server run on one store).
nlohmann::json BenchFairness(service::InferenceServer& server, const FairnessOptions& options,
                             const std::string& label);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_SERVICE_BENCH_FAIRNESS_H_
