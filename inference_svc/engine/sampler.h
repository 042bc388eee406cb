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
  // Penalties on tokens already in the turn, applied to the logits before temperature,
  // top-k and top-p (and before the greedy pick), as vLLM does: repetition_penalty first,
  // over the turn's context (AddContext) and its generated tokens (a positive logit divided
  // by it, a negative one multiplied; 1 = off), then, over the generated tokens only,
  // logit -= frequency_penalty * count + presence_penalty * (count > 0) (OpenAI's
  // definition; 0 = off). Log-probabilities stay those of the raw logits.
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0
  // (id, bias): added to the id's logit before the penalties (OpenAI's logit_bias; -100
  // in effect bans a token, 100 forces it). Biases in [-100, 100], at most kMaxLogitBias
  // entries; ids outside the vocabulary are the caller's to refuse (the sampler skips them).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // With temperature > 0: tokens less likely than min_p times the most likely one are
  // dropped (after temperature, before top-k and top-p). [0, 1]; 0 = off.
  float min_p = 0.0f;
  // The first min_tokens samples are never a stop id or (unless ignore_eos) an EOS id:
  // their logits are -inf until then (vLLM's min_tokens). 0 = off; must be >= 0.
  int min_tokens = 0;

  // InvalidArgument for negative temperature/top_k, top_p outside [0, 1], etc.
  absl::Status Validate() const;
  bool HasPenalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
  // Whether Sample changes the logits before it picks (penalties or a logit bias).
  bool AdjustsLogits() const { return HasPenalties() || !logit_bias.empty(); }
};

// The penalties' bounds (OpenAI's for presence and frequency), and the logit bias's.
inline constexpr float kMaxPenalty = 2.0f;
inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr size_t kMaxLogitBiasEntries = 1024;

class Sampler {
 public:
  // With penalties keeps the turn's token counts, and with penalties, a bias or
  // min_tokens a copy of the logits, for `vocab_size` ids. Sample() allocates nothing once
  // its thread has sampled a vocabulary this large (its candidates' scratch is per
  // thread). `eos_ids`: the model's, which min_tokens holds back (with the stop ids).
  Sampler(int vocab_size, const SamplingParams& params, std::span<const int> eos_ids = {});

  // Tokens the repetition penalty counts besides the generated ones (the turn's prompt).
  // Ids outside the vocabulary are skipped. A no-op without a repetition penalty.
  void AddContext(std::span<const int32_t> ids);

  // Picks a token from logits [vocab_size]: the logit bias and the penalties (if any)
  // first, then with temperature > 0 integer weights of softmax(logits / T), min-p,
  // top-k, top-p (the shortest prefix, by weight then id, holding top_p of the mass) and
  // one draw of the RNG over what is kept, in id order (docs/engine.md, "Sampling");
  // greedy otherwise. Sampler objects may Sample on different threads at once. The
  // picked token counts as generated for the penalties of later calls, and for
  // min_tokens.
  int32_t Sample(std::span<const float> logits);

  // True when `id` ends generation: a stop id, or an EOS id unless ignore_eos.
  bool IsStop(int32_t id, std::span<const int> eos_ids) const;

  const SamplingParams& params() const { return params_; }
  Rng& rng() { return rng_; }
  const Rng& rng() const { return rng_; }

 private:
  // logits with the bias and the penalties applied, in adjusted_.
  std::span<const float> Adjust(std::span<const float> logits);
  void Note(int32_t id, bool generated);
  int32_t Pick(std::span<const float> logits);

  SamplingParams params_;
  Rng rng_;
  // Only with penalties: per id, generated count and whether it is in the context; the ids
  // with either, each once (the penalties touch only those).
  std::vector<uint32_t> generated_;
  std::vector<uint8_t> in_context_;
  std::vector<int32_t> touched_;
  std::vector<float> adjusted_;  // only when the logits are adjusted
  std::vector<int32_t> held_back_;  // ids min_tokens holds back (stop ids, EOS ids)
  int sampled_ = 0;                 // Sample calls so far
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
