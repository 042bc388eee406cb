// Token sampling with an explicit, saveable RNG state (xoshiro256**, 4 x u64), so a
// resumed session draws exactly the numbers the uninterrupted one would have drawn
// (MemoryBlockHeader.sampler_state.rng_state).
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_SAMPLER_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_SAMPLER_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/rng.h"

namespace kvfold::engine {

// The sampler draws from the project's generator (common/rng.h).
using Rng = ::kvfold::Rng;

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties). Must be >= 0.
  int top_k = 0;             // 0 = disabled
  float top_p = 1.0f;        // (0, 1]; 0 or 1 = disabled
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;  // stop after emitting one of these
  bool ignore_eos = false;
  int max_new_tokens = 256;
  // -1 = no log-probabilities; 0..kMaxTopLogprobs: every emitted token also reports its
  // log-probability and this many most likely alternatives (ComputeLogprobs).
  int top_logprobs = -1;

  // InvalidArgument for negative temperature/top_k, top_p outside [0, 1], etc.
  absl::Status Validate() const;
};

class Sampler {
 public:
  // Keeps scratch for `vocab_size` candidates: Sample() allocates nothing.
  Sampler(int vocab_size, const SamplingParams& params);

  // Picks a token from logits [vocab_size]. Temperature > 0: softmax(logits / T), then
  // top-k, then top-p (smallest prefix of the sorted distribution with mass >= top_p),
  // then one Uniform() draw.
  int32_t Sample(std::span<const float> logits);

  // True when `id` ends generation: a stop id, or an EOS id unless ignore_eos.
  bool IsStop(int32_t id, std::span<const int> eos_ids) const;

  const SamplingParams& params() const { return params_; }
  Rng& rng() { return rng_; }
  const Rng& rng() const { return rng_; }

 private:
  SamplingParams params_;
  Rng rng_;
  std::vector<std::pair<float, int32_t>> scratch_;  // (prob, id)
};

int32_t Argmax(std::span<const float> logits);

// Most alternatives a token's log-probabilities report (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;

// One emitted token's log-probabilities. Fixed size: computing and passing it allocates
// nothing.
struct TokenLogprobs {
  float logprob = 0;  // of the emitted token
  int num_top = 0;    // valid entries of top_ids / top_logprobs
  std::array<int32_t, kMaxTopLogprobs> top_ids{};
  std::array<float, kMaxTopLogprobs> top_logprobs{};  // most likely first; ties: lower id first
};

// Log-probabilities of the model's raw distribution, log_softmax(logits) (before
// temperature, top-k and top-p: they do not change what is reported), for `token` and the
// `top_n` (clamped to [0, kMaxTopLogprobs] and the vocabulary) most likely tokens.
// `logits` is [vocab_size]; `token` must index it. Allocates nothing.
void ComputeLogprobs(std::span<const float> logits, int32_t token, int top_n, TokenLogprobs* out);

}  // namespace kvfold::engine

#endif  // KVFOLD_INFERENCE_SVC_ENGINE_SAMPLER_H_
