#include "inference_svc/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/elementwise.h"

namespace kvfold::engine {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be >= 0, got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(top_p >= 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in [0, 1], got ", top_p));
  }
  if (max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 0, got ", max_new_tokens));
  }
  for (const auto& [name, value] :
       {std::pair<const char*, float>{"presence_penalty", presence_penalty},
        {"frequency_penalty", frequency_penalty}}) {
    if (!(value >= -kMaxPenalty && value <= kMaxPenalty)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be in [-", kMaxPenalty, ", ", kMaxPenalty, "], got ", value));
    }
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be finite and > 0, got ", repetition_penalty));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (logit_bias.size() > kMaxLogitBiasEntries) {
    return absl::InvalidArgumentError(absl::StrCat("logit_bias has ", logit_bias.size(),
                                                   " entries; at most ", kMaxLogitBiasEntries));
  }
  for (const auto& [id, bias] : logit_bias) {
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias of token ", id, " must be in [-",
                                                     kMaxLogitBias, ", ", kMaxLogitBias, "], got ",
                                                     bias));
    }
  }
  if (top_logprobs < -1 || top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs,
                                                   "] (or -1: off), got ", top_logprobs));
  }
  return absl::OkStatus();
}

int32_t Argmax(std::span<const float> logits) {
  // Vector lanes (kernels/cpu/elementwise.h): a scalar scan was ~50 us per row of 32,000
  // logits, 0.8 ms of a 16-session decode step.
  return static_cast<int32_t>(
      kernels::cpu::ArgmaxRow(logits.data(), static_cast<int64_t>(logits.size())));
}

void ComputeLogprobs(std::span<const float> logits, int32_t token, int top_n, TokenLogprobs* out) {
  float max_logit = logits[0];
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_z = max_logit + std::log(sum);
  out->logprob = static_cast<float>(logits[token] - log_z);
  // The top_n largest logits by insertion into a sorted prefix; an equal logit never
  // displaces an earlier (lower) id.
  const int n = std::clamp(top_n, 0, std::min<int>(kMaxTopLogprobs, logits.size()));
  int count = 0;
  for (size_t i = 0; i < logits.size() && n > 0; ++i) {
    const float l = logits[i];
    if (count == n && !(l > out->top_logprobs[count - 1])) continue;
    int at = count < n ? count++ : n - 1;
    while (at > 0 && l > out->top_logprobs[at - 1]) {
      out->top_logprobs[at] = out->top_logprobs[at - 1];
      out->top_ids[at] = out->top_ids[at - 1];
      --at;
    }
    out->top_logprobs[at] = l;
    out->top_ids[at] = static_cast<int32_t>(i);
  }
  out->num_top = count;
  for (int i = 0; i < count; ++i) {
    out->top_logprobs[i] = static_cast<float>(out->top_logprobs[i] - log_z);
  }
}

Sampler::Sampler(int vocab_size, const SamplingParams& params)
    : params_(params), rng_(params.seed) {
  scratch_.reserve(vocab_size);
  if (params_.HasPenalties()) {
    generated_.assign(vocab_size, 0);
    in_context_.assign(vocab_size, 0);
    touched_.reserve(vocab_size);
  }
  if (params_.AdjustsLogits()) adjusted_.resize(vocab_size);
}

void Sampler::Note(int32_t id, bool generated) {
  if (id < 0 || static_cast<size_t>(id) >= generated_.size()) return;
  if (generated_[id] == 0 && in_context_[id] == 0) touched_.push_back(id);
  if (generated) {
    ++generated_[id];
  } else {
    in_context_[id] = 1;
  }
}

void Sampler::AddContext(std::span<const int32_t> ids) {
  if (params_.repetition_penalty == 1.0f) return;
  for (int32_t id : ids) Note(id, /*generated=*/false);
}

std::span<const float> Sampler::Adjust(std::span<const float> logits) {
  if (logits.size() != adjusted_.size()) return logits;  // not this sampler's vocabulary
  std::copy(logits.begin(), logits.end(), adjusted_.begin());
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id >= 0 && static_cast<size_t>(id) < adjusted_.size()) adjusted_[id] += bias;
  }
  const float rep = params_.repetition_penalty;
  for (int32_t id : touched_) {
    float v = adjusted_[id];
    if (rep != 1.0f) v = v > 0.0f ? v / rep : v * rep;
    if (const uint32_t n = generated_[id]; n > 0) {
      v -= params_.frequency_penalty * static_cast<float>(n) + params_.presence_penalty;
    }
    adjusted_[id] = v;
  }
  return adjusted_;
}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (!params_.AdjustsLogits()) return Pick(logits);
  const int32_t token = Pick(Adjust(logits));
  if (params_.HasPenalties()) Note(token, /*generated=*/true);
  return token;
}

int32_t Sampler::Pick(std::span<const float> logits) {
  if (params_.temperature <= 0.0f || params_.top_k == 1) return Argmax(logits);
  const float inv_t = 1.0f / params_.temperature;
  float max_logit = logits[0];
  for (float l : logits) max_logit = std::max(max_logit, l);
  scratch_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    scratch_.emplace_back(std::exp((logits[i] - max_logit) * inv_t), static_cast<int32_t>(i));
  }
  // min-p: the most likely token has probability 1 here, so the cut is min_p itself.
  if (params_.min_p > 0.0f) {
    const float cut = params_.min_p;
    scratch_.erase(
        std::remove_if(scratch_.begin(), scratch_.end(),
                       [cut](const std::pair<float, int32_t>& c) { return c.first < cut; }),
        scratch_.end());
  }
  // Order by probability, ties by id: a deterministic candidate list.
  auto by_prob = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t n = scratch_.size();
  const bool use_top_p = params_.top_p > 0.0f && params_.top_p < 1.0f;
  // The shortest prefix of the first `sorted` candidates (in order) whose mass reaches
  // `cut`, or `sorted` when none does; `cum` carries the mass before them.
  auto prefix_reaching = [this](size_t from, size_t sorted, double cut, double* cum) {
    for (size_t i = from; i < sorted; ++i) {
      *cum += scratch_[i].first;
      if (*cum >= cut) return i + 1;
    }
    return sorted;
  };
  // Candidates [from, k) in their final order. A few: a partial sort (one pass against a
  // small heap); more: those that a full sort would put there (nth_element, linear), then
  // sorted, as a heap-based partial sort is several times slower once k is a large part
  // of the candidates.
  auto sort_up_to = [this, &by_prob](size_t from, size_t k) {
    const size_t rest = scratch_.size() - from;
    if ((k - from) * 256 <= rest) {  // a few: one pass against a small heap
      std::partial_sort(scratch_.begin() + from, scratch_.begin() + k, scratch_.end(), by_prob);
      return;
    }
    if (k < scratch_.size()) {
      std::nth_element(scratch_.begin() + from, scratch_.begin() + k, scratch_.end(), by_prob);
    }
    std::sort(scratch_.begin() + from, scratch_.begin() + k, by_prob);
  };
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    sort_up_to(0, params_.top_k);
    n = params_.top_k;
    if (use_top_p) {
      double k_total = 0.0;
      for (size_t i = 0; i < n; ++i) k_total += scratch_[i].first;
      double cum = 0.0;
      n = prefix_reaching(0, n, params_.top_p * k_total, &cum);
    }
  } else if (use_top_p) {
    // Only the most likely candidates can make up top_p of the mass: sort a prefix that
    // grows until it does, each round only the next candidates (the ones before stay the
    // largest, in order), instead of the whole vocabulary (a full sort of 32,000 took
    // ~2.3 ms a token). A round grows the prefix at least x8, and at least by the
    // candidates the missing mass needs at the prefix's smallest probability; past half of
    // them the rest is sorted at once. The prefix is the full sort's: the order is total.
    double all = 0.0;
    for (const auto& c : scratch_) all += c.first;
    const double cut = params_.top_p * all;
    double cum = 0.0;
    size_t sorted = 0;
    for (size_t k = std::min<size_t>(n, 64);;) {
      sort_up_to(sorted, k);
      const size_t keep = prefix_reaching(sorted, k, cut, &cum);
      if (keep < k || cum >= cut || k == n) {
        n = keep;
        break;
      }
      sorted = k;
      const double smallest = scratch_[k - 1].first;
      const double missing = smallest > 0 ? (cut - cum) / smallest : static_cast<double>(n);
      size_t next = std::max(k * 8, k + static_cast<size_t>(std::min<double>(missing, n)));
      if (next * 2 >= n) next = n;
      k = next;
    }
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += scratch_[i].first;
  const double u = rng_.Uniform() * total;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += scratch_[i].first;
    if (u < cum) return scratch_[i].second;
  }
  return scratch_[n - 1].second;
}

bool Sampler::IsStop(int32_t id, std::span<const int> eos_ids) const {
  for (int32_t s : params_.stop_token_ids) {
    if (s == id) return true;
  }
  if (!params_.ignore_eos) {
    for (int e : eos_ids) {
      if (e == id) return true;
    }
  }
  return false;
}

}  // namespace kvfold::engine
