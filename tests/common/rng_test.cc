#include "common/rng.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <thread>

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

TEST(RngTest, RandomHexGivesDistinctHexIdsOnEveryThread) {
  std::set<std::string> seen;
  for (int digits : {1, 15, 16, 17, 24, 32, 40}) {
    const std::string id = RandomHex(digits);
    ASSERT_EQ(id.size(), static_cast<size_t>(digits));
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  }
  for (int i = 0; i < 1000; ++i) seen.insert(RandomHex(24));
  std::string other;
  std::thread([&] { other = RandomHex(24); }).join();
  seen.insert(other);
  EXPECT_EQ(seen.size(), 1001u);  // 96 random bits each: a repeat would be a broken generator
  // Every digit value appears in every position of a 16-digit word over many draws (a
  // word's nibbles all used, none stuck).
  std::set<std::pair<int, char>> positions;
  for (int i = 0; i < 2000; ++i) {
    const std::string id = RandomHex(16);
    for (int k = 0; k < 16; ++k) positions.insert({k, id[k]});
  }
  EXPECT_EQ(positions.size(), 16u * 16u);
}

}  // namespace
}  // namespace kvfold
