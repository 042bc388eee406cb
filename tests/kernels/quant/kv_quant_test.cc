#include "kernels/quant/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "gtest/gtest.h"

namespace kvfold::quant {
namespace {

std::vector<float> RandomMatrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> m(rows * cols);
  for (auto& x : m) x = dist(rng);
  // Outlier channels, as real keys have: channel 3 and the last channel are 20x larger.
  for (int64_t r = 0; r < rows; ++r) {
    if (cols > 3) m[r * cols + 3] *= 20.0f;
    m[r * cols + cols - 1] *= 20.0f;
  }
  return m;
}

// Absolute maximum over the key group that holds (t, c).
float KeyGroupAmax(const std::vector<float>& x, int64_t num_tokens, int64_t channels,
                   int32_t g, int64_t t, int64_t c) {
  const int64_t t0 = t / g * g, t1 = std::min<int64_t>(num_tokens, t0 + g);
  float amax = 0;
  for (int64_t i = t0; i < t1; ++i) amax = std::max(amax, std::fabs(x[i * channels + c]));
  return amax;
}

float ValueGroupAmax(const std::vector<float>& x, int64_t channels, int32_t g, int64_t t,
                     int64_t c) {
  const int64_t c0 = c / g * g, c1 = std::min<int64_t>(channels, c0 + g);
  float amax = 0;
  for (int64_t i = c0; i < c1; ++i) amax = std::max(amax, std::fabs(x[t * channels + i]));
  return amax;
}

struct Shape {
  int64_t num_tokens;
  int64_t channels;
  int32_t group_size;
  bool fp16_scales;
};

class KvQuantTest : public ::testing::TestWithParam<Shape> {};

TEST_P(KvQuantTest, KeysRoundTripWithinHalfAStepPerChannelGroup) {
  const Shape s = GetParam();
  const auto keys = RandomMatrix(s.num_tokens, s.channels, 11);
  KvQuantOptions opt{.group_size = s.group_size, .fp16_scales = s.fp16_scales};
  std::vector<int8_t> codes(keys.size());
  std::vector<float> scales(NumKeyGroups(s.num_tokens, s.group_size) * s.channels);
  ASSERT_TRUE(QuantizeKeys(keys.data(), s.num_tokens, s.channels, opt, codes.data(),
                           scales.data()).ok());
  std::vector<float> back(keys.size());
  ASSERT_TRUE(DequantizeKeys(codes.data(), scales.data(), s.num_tokens, s.channels,
                             s.group_size, back.data()).ok());
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    for (int64_t c = 0; c < s.channels; ++c) {
      const float amax = KeyGroupAmax(keys, s.num_tokens, s.channels, s.group_size, t, c);
      const float scale = scales[(t / s.group_size) * s.channels + c];
      // fp16 rounding of the scale may push the group maximum one clamp step out.
      const float bound = s.fp16_scales ? scale * 0.5f + amax * 1e-3f : scale * 0.5f;
      ASSERT_LE(std::fabs(keys[t * s.channels + c] - back[t * s.channels + c]),
                bound + 1e-6f * amax)
          << "t=" << t << " c=" << c;
      ASSERT_LE(scale, amax / 127.0f * 1.001f + 1e-30f);
    }
  }
}

TEST_P(KvQuantTest, ValuesRoundTripWithinHalfAStepPerTokenGroup) {
  const Shape s = GetParam();
  const auto values = RandomMatrix(s.num_tokens, s.channels, 12);
  KvQuantOptions opt{.group_size = s.group_size, .fp16_scales = s.fp16_scales};
  const int64_t groups = NumValueGroups(s.channels, s.group_size);
  std::vector<int8_t> codes(values.size());
  std::vector<float> scales(s.num_tokens * groups);
  ASSERT_TRUE(QuantizeValues(values.data(), s.num_tokens, s.channels, opt, codes.data(),
                             scales.data()).ok());
  std::vector<float> back(values.size());
  ASSERT_TRUE(DequantizeValues(codes.data(), scales.data(), s.num_tokens, s.channels,
                               s.group_size, back.data()).ok());
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    for (int64_t c = 0; c < s.channels; ++c) {
      const float amax = ValueGroupAmax(values, s.channels, s.group_size, t, c);
      const float scale = scales[t * groups + c / s.group_size];
      const float bound = s.fp16_scales ? scale * 0.5f + amax * 1e-3f : scale * 0.5f;
      ASSERT_LE(std::fabs(values[t * s.channels + c] - back[t * s.channels + c]),
                bound + 1e-6f * amax)
          << "t=" << t << " c=" << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OddShapes, KvQuantTest,
                         ::testing::Values(Shape{1000, 769, 32, false}, Shape{17, 5, 16, false},
                                           Shape{5125, 64, 16, true}, Shape{1, 1, 1, false},
                                           Shape{33, 129, 128, true}));

TEST(KvQuant, GroupMaximumMapsToPlusMinus127AndScalesArePerGroup) {
  // Two key groups of 4 tokens, 2 channels; channel 1 of group 1 is 100x larger.
  const std::vector<float> keys = {1, 0.5f, -2, 0.25f, 0.5f, 0, 1, 0,
                                   0.1f, 50, 0.2f, -100, 0.3f, 25, 0.4f, 0};
  std::vector<int8_t> codes(keys.size());
  std::vector<float> scales(4);
  ASSERT_TRUE(QuantizeKeys(keys.data(), 8, 2, {.group_size = 4}, codes.data(),
                           scales.data()).ok());
  EXPECT_FLOAT_EQ(scales[0], 2.0f / 127);
  EXPECT_FLOAT_EQ(scales[1], 0.5f / 127);
  EXPECT_FLOAT_EQ(scales[2], 0.4f / 127);
  EXPECT_FLOAT_EQ(scales[3], 100.0f / 127);
  EXPECT_EQ(codes[2], -127);   // token 1, channel 0 = -2 = -amax
  EXPECT_EQ(codes[11], -127);  // token 5, channel 1 = -100
  EXPECT_EQ(codes[1], 127);    // token 0, channel 1 = 0.5 = amax
  EXPECT_EQ(codes[14], 127);   // token 7, channel 0 = 0.4
  EXPECT_EQ(codes[13], 32);    // 25 / (100 / 127) = 31.75 -> 32
}

TEST(KvQuant, AllZeroGroupHasZeroScaleAndCodes) {
  std::vector<float> values(3 * 7, 0.0f);
  values[20] = 3.0f;  // token 2, channel 6: only the second group of token 2 is non-zero
  std::vector<int8_t> codes(values.size(), 99);
  std::vector<float> scales(3 * 2, -1);
  ASSERT_TRUE(QuantizeValues(values.data(), 3, 7, {.group_size = 4}, codes.data(),
                             scales.data()).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(scales[i], 0.0f) << i;
  EXPECT_FLOAT_EQ(scales[5], 3.0f / 127);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(codes[i], 0) << i;
  EXPECT_EQ(codes[20], 127);
}

TEST(KvQuant, Fp16ScalesAreExactlyRepresentable) {
  const auto keys = RandomMatrix(40, 33, 5);
  std::vector<int8_t> codes(keys.size());
  std::vector<float> scales(NumKeyGroups(40, 16) * 33);
  ASSERT_TRUE(QuantizeKeys(keys.data(), 40, 33, {.group_size = 16, .fp16_scales = true},
                           codes.data(), scales.data()).ok());
  for (float s : scales) EXPECT_EQ(s, Fp16ToFp32(Fp32ToFp16(s)));
}

TEST(KvQuant, RejectsBadArguments) {
  float x = 1;
  int8_t q;
  float s;
  EXPECT_EQ(QuantizeKeys(&x, 1, 1, {.group_size = 0}, &q, &s).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeValues(&x, -1, 1, {}, &q, &s).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeValues(nullptr, 1, 1, {}, &q, &s).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(QuantizeValues(nullptr, 0, 0, {}, nullptr, nullptr).ok());
}

TEST(KvQuant, BytesPerTokenIsAboutHalfOfFp16) {
  // Llama-3.1-8B: 8 KV heads x 128 = 1024 channels; fp16 KV = 4096 bytes per token-layer.
  const double b = Int8BytesPerToken(1024, {.group_size = 16, .fp16_scales = true});
  EXPECT_NEAR(b, 1024 + 2.0 * 1024 / 16 + 1024 + 2.0 * 64, 1e-9);
  EXPECT_LT(b / 4096.0, 0.57);
}

}  // namespace
}  // namespace kvfold::quant
