#include "common/rng.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvfold {
namespace {

TEST(RngTest, SplitMix64GivesTheReferenceSequence) {
  uint64_t state = 0;
  EXPECT_EQ(SplitMix64(state), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(SplitMix64(state), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(SplitMix64(state), 0x06c45d188009454fULL);
  EXPECT_EQ(state, 3 * 0x9e3779b97f4a7c15ULL);
}

// The state is four splitmix64 outputs of the seed; the draws are xoshiro256**'s, computed
// here by an independent big-integer implementation of the reference algorithm.
TEST(RngTest, XoshiroDrawsFromTheSplitMixSeededState) {
  Rng rng(0);
  uint64_t seed = 0;
  for (uint64_t word : rng.state()) EXPECT_EQ(word, SplitMix64(seed));
  EXPECT_EQ(rng.Next(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(rng.Next(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(rng.Next(), 0x1a5f849d4933e6e0ULL);
}

TEST(RngTest, UniformTakesTheTop53Bits) {
  Rng a(7), b(7);
  for (int i = 0; i < 1000; ++i) {
    const double u = a.Uniform();
    EXPECT_EQ(u, static_cast<double>(b.Next() >> 11) * 0x1.0p-53);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(RngTest, SavedStateResumesTheSameDraws) {
  Rng a(42);
  for (int i = 0; i < 10; ++i) a.Next();
  Rng b;
  b.set_state(a.state());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.Next(), b.Next());
}

}  // namespace
}  // namespace kvfold
