#include "inference_svc/runtime/sampling.h"

#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kvfold::runtime {

absl::Status ValidateSampling(const SamplingSpec& p, int vocab_size, int max_new_tokens_cap) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k));
  if (!std::isfinite(p.top_p) || p.top_p < 0 || p.top_p > 1) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in [0, 1], got ", p.top_p));
  }
  if (p.max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 0, got ", p.max_new_tokens));
  }
  if (p.max_new_tokens > max_new_tokens_cap) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens ", p.max_new_tokens,
                                                   " exceeds the server cap ",
                                                   max_new_tokens_cap));
  }
  const int min_cap = p.max_new_tokens > 0 ? p.max_new_tokens : max_new_tokens_cap;
  if (p.min_tokens < 0 || p.min_tokens > min_cap) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_tokens ", p.min_tokens, " outside [0, ", min_cap, "] (",
        p.max_new_tokens > 0 ? "max_new_tokens" : "the server's max_new_tokens cap", ")"));
  }
  // The penalties', min_p's and the bias's value ranges are the engine's own rules.
  if (absl::Status s = ResolveSampling(p, 1).Validate(); !s.ok()) return s;
  absl::flat_hash_set<int32_t> biased;
  for (const auto& entry : p.logit_bias) {
    const int32_t id = entry.first;
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias token id ", id, " outside [0, ", vocab_size, ")"));
    }
    if (!biased.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias names token id ", id, " twice"));
    }
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop token id ", id, " outside [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

SamplingSpec MergeSampling(const SamplingSpec& defaults, const SamplingSpec& o) {
  SamplingSpec out = defaults;
  if (o.temperature != 0) out.temperature = o.temperature;
  if (o.top_k != 0) out.top_k = o.top_k;
  if (o.top_p != 0) out.top_p = o.top_p;
  if (o.seed != 0) out.seed = o.seed;
  if (!o.stop_token_ids.empty()) out.stop_token_ids = o.stop_token_ids;
  if (o.ignore_eos) out.ignore_eos = true;
  if (o.max_new_tokens != 0) out.max_new_tokens = o.max_new_tokens;
  if (o.presence_penalty != 0) out.presence_penalty = o.presence_penalty;
  if (o.frequency_penalty != 0) out.frequency_penalty = o.frequency_penalty;
  if (o.repetition_penalty != 0) out.repetition_penalty = o.repetition_penalty;
  if (o.min_p != 0) out.min_p = o.min_p;
  if (!o.logit_bias.empty()) out.logit_bias = o.logit_bias;
  if (o.min_tokens != 0) out.min_tokens = o.min_tokens;
  return out;
}

engine::SamplingParams ResolveSampling(const SamplingSpec& p, int default_max_new_tokens) {
  engine::SamplingParams s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p == 0 ? 1.0f : p.top_p;
  s.seed = p.seed;
  s.stop_token_ids = p.stop_token_ids;
  s.ignore_eos = p.ignore_eos;
  s.max_new_tokens = p.max_new_tokens > 0 ? p.max_new_tokens : default_max_new_tokens;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.repetition_penalty = p.repetition_penalty == 0 ? 1.0f : p.repetition_penalty;
  s.min_p = p.min_p;
  s.min_tokens = p.min_tokens;
  s.logit_bias = p.logit_bias;
  return s;
}

}  // namespace kvfold::runtime
