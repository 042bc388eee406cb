// What the sampler costs per token (engine::Sampler::Sample), one thread, per setting:
// greedy alone, with the presence/frequency/repetition penalties and with a logit bias;
// temperature alone, with top-k 40, with top-p 0.9 and the penalties, with min-p 0.05.
// Logits: `vocab` draws of normal(0, sigma), 16 rows in turn (flatter as sigma shrinks:
// top-p then keeps more candidates; a random model's logits are nearly flat); 200 context
// ids for the repetition penalty. Also engine::ComputeLogprobs with 5 alternatives (what a
// turn that asks for log-probabilities adds per token). Medians of five runs, in
// microseconds.
#ifndef KVFOLD_TOOLS_BENCH_ENGINE_SAMPLER_PROBE_H_
#define KVFOLD_TOOLS_BENCH_ENGINE_SAMPLER_PROBE_H_

#include "nlohmann/json.hpp"

namespace kvfold::bench {

// {"vocab", "sigma", "us_per_token": {"greedy", "greedy_penalties", "greedy_logit_bias",
//  "temperature", "top_k_40", "top_p_0.9", "top_p_0.9_penalties", "top_p_0.9_min_p_0.05",
//  "logprobs_top_5"}}.
nlohmann::json SamplerProbe(int vocab, float sigma);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_ENGINE_SAMPLER_PROBE_H_
