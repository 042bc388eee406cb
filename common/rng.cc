#include "common/rng.h"

#include <random>

namespace kvfold {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) w = SplitMix64(x);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

uint64_t RandomWord() {
  thread_local std::mt19937_64 generator(std::random_device{}());
  return generator();
}

std::string RandomHex(int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(static_cast<size_t>(digits));
  uint64_t bits = 0;
  for (int i = 0; i < digits; ++i, bits >>= 4) {
    if (i % 16 == 0) bits = RandomWord();
    out.push_back(kHex[bits & 15]);
  }
  return out;
}

}  // namespace kvfold
