#include "common/fp16.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace kvfold {
namespace {

TEST(Fp16Test, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.0f, 0.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(Fp16ToFp32(Fp32ToFp16(f)), f) << f;
  }
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3c00);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(1e6f), 0x7c00);
  EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Fp16Test, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(Fp32ToFp16(f), h) << std::hex << h;
  }
}

TEST(Fp16Test, RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Subnormal halfway: 1.5 * 2^-24 -> 2 * 2^-24.
  EXPECT_EQ(Fp32ToFp16(1.5f * std::ldexp(1.0f, -24)), 0x0002);
}

TEST(Bf16Test, RoundTripAndRounding) {
  EXPECT_EQ(Bf16ToFp32(Fp32ToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToFp32(Fp32ToBf16(-3.5f)), -3.5f);
  EXPECT_EQ(Fp32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
}

}  // namespace
}  // namespace kvfold
