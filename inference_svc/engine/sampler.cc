#include "inference_svc/engine/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
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
  if (min_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens must be >= 0, got ", min_tokens));
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
  // The largest logit (NaN only when logits[0] is), then the normaliser in vector lanes: a
  // scalar max and double exp per logit took ~320 us a token over 32,000 logits.
  const auto vocab = static_cast<int64_t>(logits.size());
  const float max_logit = logits[kernels::cpu::ArgmaxRow(logits.data(), vocab)];
  const double sum = kernels::cpu::SumExpRow(logits.data(), vocab, max_logit);
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

Sampler::Sampler(int vocab_size, const SamplingParams& params, std::span<const int> eos_ids)
    : params_(params), rng_(params.seed) {
  if (params_.HasPenalties()) {
    generated_.assign(vocab_size, 0);
    in_context_.assign(vocab_size, 0);
    touched_.reserve(vocab_size);
  }
  if (params_.AdjustsLogits() || params_.min_tokens > 0) adjusted_.resize(vocab_size);
  if (params_.min_tokens > 0) {
    held_back_ = params_.stop_token_ids;
    if (!params_.ignore_eos) held_back_.insert(held_back_.end(), eos_ids.begin(), eos_ids.end());
  }
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
  const bool hold_back = sampled_ < params_.min_tokens && !held_back_.empty();
  ++sampled_;
  if (!params_.AdjustsLogits() && !hold_back) return Pick(logits);
  std::span<const float> adjusted = Adjust(logits);
  if (hold_back && adjusted.data() == adjusted_.data()) {
    for (int32_t id : held_back_) {
      if (id >= 0 && static_cast<size_t>(id) < adjusted_.size()) {
        adjusted_[id] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  const int32_t token = Pick(adjusted);
  if (params_.HasPenalties()) Note(token, /*generated=*/true);
  return token;
}

namespace {

// The calling thread's scratch for Pick: the candidates' keys and masses
// (kernels::cpu::SamplingMassRow), the ids of a selection level's boundary bin, and its
// bins. Per thread, not per sampler: a session's sampler keeps no per-token scratch, and
// a thread allocates only the first time it samples a larger vocabulary.
struct PickScratch {
  static constexpr int kBins = 2048;  // the most any level uses
  struct Bin {
    uint64_t count = 0, mass = 0;
  };
  std::vector<uint32_t> keys;
  std::vector<uint64_t> mass;
  std::vector<int32_t> ids;
  std::array<Bin, kBins> bins;
};

PickScratch& ScratchFor(size_t n) {
  thread_local PickScratch scratch;
  if (scratch.keys.size() < n) {
    scratch.keys.resize(n);
    scratch.mass.resize(n);
    scratch.ids.resize(n);
  }
  return scratch;
}

// A prefix of the candidates in the sampler's order (key descending, then id ascending):
// those with a key above `key`, and those with `key` up to id `last`. {0, -1} holds every
// candidate (key 0 marks a non-candidate).
struct Prefix {
  uint32_t key = 0;
  int64_t last = -1;
  uint64_t count = 0, mass = 0;
};

// The shortest prefix at whose end stop(count, mass) holds, or every candidate when none
// does; `stop` must stay true once true as the prefix grows. Without sorting: the keys'
// bits 29..20 (a weight <= 1 has bit 30 clear) pick one of 1024 bins, and the bins are
// walked from the top, counting whole bins while stop stays false; only the bin where it
// turns is looked into, by bits 19..9, then by bits 8..0, which leaves one key, whose
// candidates go in id order. Each level is one pass over the ids left (the first over all
// of them; a candidate's weight is above 2^-41, so bin 0 holds only non-candidates there).
template <typename Stop>
Prefix SelectPrefix(PickScratch& s, int64_t n, Stop stop) {
  Prefix p;
  constexpr struct {
    int shift;
    uint32_t mask;
  } kLevels[] = {{20, 0x3FF}, {9, 0x7FF}, {0, 0x1FF}};
  int64_t left = -1;  // ids in s.ids[0, left); -1: every id (the first level)
  uint32_t high = 0;  // the key bits the levels above fixed
  for (int level = 0; level < 3; ++level) {
    const int shift = kLevels[level].shift;
    const uint32_t mask = kLevels[level].mask;
    std::fill_n(s.bins.begin(), mask + 1, PickScratch::Bin{});
    if (left < 0) {
      // Even and odd ids into two sets of bins (the second at kBins / 2): neighbours of a
      // flat distribution share a bin, and one set made every add wait for the last.
      constexpr uint32_t kOdd = PickScratch::kBins / 2;
      static_assert(0x3FF < kOdd);
      std::fill_n(s.bins.begin() + kOdd, mask + 1, PickScratch::Bin{});
      int64_t i = 0;
      for (; i + 2 <= n; i += 2) {
        PickScratch::Bin& even = s.bins[(s.keys[i] >> shift) & mask];
        PickScratch::Bin& odd = s.bins[kOdd + ((s.keys[i + 1] >> shift) & mask)];
        ++even.count;
        even.mass += s.mass[i];
        ++odd.count;
        odd.mass += s.mass[i + 1];
      }
      if (i < n) {
        PickScratch::Bin& bin = s.bins[(s.keys[i] >> shift) & mask];
        ++bin.count;
        bin.mass += s.mass[i];
      }
      for (uint32_t b = 0; b <= mask; ++b) {
        s.bins[b].count += s.bins[kOdd + b].count;
        s.bins[b].mass += s.bins[kOdd + b].mass;
      }
      s.bins[0] = {};  // the non-candidates
    } else {
      for (int64_t j = 0; j < left; ++j) {
        PickScratch::Bin& bin = s.bins[(s.keys[s.ids[j]] >> shift) & mask];
        ++bin.count;
        bin.mass += s.mass[s.ids[j]];
      }
    }
    int64_t b = mask;
    for (; b >= 0; --b) {
      const PickScratch::Bin& bin = s.bins[b];
      if (bin.count > 0 && stop(p.count + bin.count, p.mass + bin.mass)) break;
      p.count += bin.count;
      p.mass += bin.mass;
    }
    if (b < 0) return {0, -1, p.count, p.mass};  // stop never holds: every candidate
    high |= static_cast<uint32_t>(b) << shift;
    // The ids in bin b, in id order, for the next level.
    const uint32_t keep_mask = ~((uint32_t{1} << shift) - 1);
    int64_t kept = 0;
    if (left < 0) {
      for (int64_t i = 0; i < n; ++i) {
        s.ids[kept] = static_cast<int32_t>(i);
        kept += (s.keys[i] & keep_mask) == high;
      }
    } else {
      for (int64_t j = 0; j < left; ++j) {
        s.ids[kept] = s.ids[j];
        kept += (s.keys[s.ids[j]] & keep_mask) == high;
      }
    }
    left = kept;
  }
  // One key left: its candidates in id order until stop holds.
  for (int64_t j = 0; j < left; ++j) {
    const int64_t i = s.ids[j];
    ++p.count;
    p.mass += s.mass[i];
    if (stop(p.count, p.mass)) return {high, i, p.count, p.mass};
  }
  return {0, -1, p.count, p.mass};  // not reached: the bin's candidates make stop hold
}

// ceil(top_p * total), exactly: top_p = mant * 2^-shift with a 24-bit mant.
uint64_t MassCut(float top_p, uint64_t total) {
  int e = 0;
  const float f = std::frexp(top_p, &e);  // top_p = f * 2^e, f in [0.5, 1)
  const auto mant = static_cast<uint64_t>(std::ldexp(f, 24));
  const int shift = 24 - e;
  const unsigned __int128 product = static_cast<unsigned __int128>(mant) * total;
  if (shift >= 127) return product > 0 ? 1 : 0;
  const unsigned __int128 one = 1;
  return static_cast<uint64_t>((product + (one << shift) - 1) >> shift);
}

}  // namespace

int32_t Sampler::Pick(std::span<const float> logits) {
  if (params_.temperature <= 0.0f || params_.top_k == 1) return Argmax(logits);
  const auto n = static_cast<int64_t>(logits.size());
  if (n == 0) return 0;
  const int32_t best = Argmax(logits);
  const float max_logit = logits[best];
  if (!std::isfinite(max_logit)) return best;
  PickScratch& s = ScratchFor(logits.size());
  // Integer masses (docs/engine.md, "Sampling"): the most likely token has weight 1, so
  // min-p's cut is min_p itself.
  const uint64_t total =
      kernels::cpu::SamplingMassRow(logits.data(), n, max_logit, 1.0f / params_.temperature,
                                    params_.min_p, s.keys.data(), s.mass.data());
  Prefix keep{0, -1, 0, total};
  if (params_.top_k > 0 && params_.top_k < n) {
    const auto k = static_cast<uint64_t>(params_.top_k);
    keep = SelectPrefix(s, n, [k](uint64_t count, uint64_t) { return count >= k; });
  }
  if (params_.top_p > 0.0f && params_.top_p < 1.0f) {
    // The shortest prefix of the kept candidates holding top_p of their mass.
    const uint64_t cut = MassCut(params_.top_p, keep.mass);
    const uint64_t most = keep.key == 0 ? UINT64_MAX : keep.count;
    keep = SelectPrefix(
        s, n, [cut, most](uint64_t count, uint64_t mass) { return mass >= cut || count >= most; });
  }
  // One draw over the kept mass, walked in id order: 64 ids at a time, then one by one in
  // the chunk where the draw lands. A non-candidate's mass is 0, so keeping every
  // candidate needs no test (and the chunk's sum is one the compiler vectorises).
  const auto u =
      static_cast<uint64_t>((static_cast<unsigned __int128>(rng_.Next() >> 11) * keep.mass) >> 53);
  auto walk = [&s, n, u](auto kept_mass) -> int64_t {
    uint64_t run = 0;
    for (int64_t c = 0; c < n; c += 64) {
      const int64_t end = std::min<int64_t>(n, c + 64);
      uint64_t sum = 0;
      for (int64_t i = c; i < end; ++i) sum += kept_mass(i);
      if (run + sum > u) {
        for (int64_t i = c; i < end; ++i) {
          run += kept_mass(i);
          if (run > u) return i;
        }
      }
      run += sum;
    }
    return -1;  // not reached: u < keep.mass
  };
  const int64_t token = keep.key == 0 ? walk([&s](int64_t i) { return s.mass[i]; })
                                      : walk([&s, &keep](int64_t i) -> uint64_t {
                                          // Branches: few candidates pass on a peaked distribution,
                                          // and a masked sum was slower there.
                                          const uint32_t key = s.keys[i];
                                          if (key < keep.key || (key == keep.key && i > keep.last))
                                            return 0;
                                          return s.mass[i];
                                        });
  if (token >= 0) return static_cast<int32_t>(token);
  return best;  // not reached: u < keep.mass
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
