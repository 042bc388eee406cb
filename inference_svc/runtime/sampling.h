// Sampling as a caller states it. Every zero / empty field means "not set": a turn's
// overrides are merged onto the session's defaults field by field, and what is still unset
// takes the replica's defaults when the turn is resolved into engine::SamplingParams.
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_SAMPLING_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_SAMPLING_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "inference_svc/engine/sampler.h"

namespace kvfold::runtime {

struct SamplingSpec {
  float temperature = 0;  // 0 = greedy
  int top_k = 0;          // 0 = off
  float top_p = 0;        // 0 = off (same as 1)
  uint64_t seed = 0;      // non-zero in a turn: the RNG restarts from this seed
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int max_new_tokens = 0;  // 0 = the replica's default
  // engine::SamplingParams's penalties; 0 = not set (presence and frequency: off;
  // repetition: 1, off).
  float presence_penalty = 0;
  float frequency_penalty = 0;
  float repetition_penalty = 0;
  float min_p = 0;                                    // 0 = off
  std::vector<std::pair<int32_t, float>> logit_bias;  // empty = not set
  int min_tokens = 0;                                 // 0 = off (engine::SamplingParams)
};

// temperature finite and >= 0; top_k >= 0; top_p in [0, 1]; max_new_tokens in
// [0, max_new_tokens_cap]; stop ids in [0, vocab_size); presence and frequency penalties
// in [-2, 2]; repetition penalty finite and >= 0; min_p in [0, 1]; min_tokens in
// [0, max_new_tokens] (max_new_tokens_cap when unset); logit_bias: at most
// engine::kMaxLogitBiasEntries ids in [0, vocab_size), each once, biases in [-100, 100].
// INVALID_ARGUMENT otherwise, the message naming the field and the value.
absl::Status ValidateSampling(const SamplingSpec& spec, int vocab_size, int max_new_tokens_cap);

// `overrides` on top of `defaults`: every set field of overrides wins.
SamplingSpec MergeSampling(const SamplingSpec& defaults, const SamplingSpec& overrides);

// The engine's parameters: top_p 0 -> 1, repetition_penalty 0 -> 1, max_new_tokens 0 ->
// default_max_new_tokens.
engine::SamplingParams ResolveSampling(const SamplingSpec& spec, int default_max_new_tokens);

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_SAMPLING_H_
