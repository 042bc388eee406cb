// xoshiro256** 1.0 (Blackman & Vigna), seeded through splitmix64: the one pseudo-random
// generator of the project. Its whole state is four words, so a sampler's draws can be
// saved with a session and resumed exactly, and a random model's weights follow from
// its seed alone.
#ifndef KVFOLD_COMMON_RNG_H_
#define KVFOLD_COMMON_RNG_H_

#include <array>
#include <cstdint>
#include <string>

namespace kvfold {

// splitmix64 (Steele, Lea & Flood): advances `state` by the golden gamma and returns the
// mixed value. Rng seeds through it; on its own it is a fast generator of 64-bit words.
uint64_t SplitMix64(uint64_t& state);

class Rng {
 public:
  Rng() : Rng(0) {}
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double Uniform();  // [0, 1) with 53 random bits
  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_;
};

// A word from a per-thread generator seeded by std::random_device: for what must differ
// between processes and runs (ids that must not collide, an unseeded request's seed).
// Not reproducible; samplers use Rng.
uint64_t RandomWord();

// `digits` lowercase hex digits of RandomWord: the random part of session, response and
// tool-call ids.
std::string RandomHex(int digits);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_RNG_H_
