// Q8 weight rows: layout, error bound, zero rows and partial last blocks.
#include "kernels/quant/weight_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace kvfold::quant {
namespace {

using core::kQ8Block;
using core::Q8RowBytes;

TEST(WeightQ8Test, RoundTripWithinHalfAStepOnOddWidths) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 0.05f);
  for (int64_t cols : {1, 7, 31, 32, 33, 75, 172, 768}) {
    std::vector<float> x(cols);
    for (float& v : x) v = g(rng);
    x[cols / 2] = 0.9f;  // one outlier: its block's scale is larger
    std::vector<uint8_t> row(Q8RowBytes(cols));
    QuantizeRowQ8(x.data(), cols, row.data());
    const int64_t blocks = (cols + kQ8Block - 1) / kQ8Block;
    ASSERT_EQ(row.size(), static_cast<size_t>(blocks * (2 + kQ8Block)));
    std::vector<float> y(cols);
    DequantizeRowQ8(row.data(), cols, y.data());
    const int8_t* codes = reinterpret_cast<const int8_t*>(row.data() + blocks * 2);
    for (int64_t b = 0; b < blocks; ++b) {
      uint16_t h;
      std::memcpy(&h, row.data() + b * 2, 2);
      const float d = Fp16ToFp32(h);
      float amax = 0;
      for (int64_t c = b * kQ8Block; c < std::min(cols, (b + 1) * kQ8Block); ++c) {
        amax = std::max(amax, std::fabs(x[c]));
        EXPECT_LE(std::fabs(y[c] - x[c]), 0.5f * d * 1.001f) << cols << " " << c;
        EXPECT_GE(codes[c], -127);
        EXPECT_LE(codes[c], 127);
      }
      EXPECT_NEAR(d, amax / 127.0f, amax / 127.0f * 1e-3f);
      for (int64_t c = cols; c < (b + 1) * kQ8Block; ++c) EXPECT_EQ(codes[c], 0) << "padding";
    }
  }
}

TEST(WeightQ8Test, ZeroRowHasZeroScalesAndCodes) {
  std::vector<float> x(40, 0.0f);
  std::vector<uint8_t> row(Q8RowBytes(40), 0xAB);
  QuantizeRowQ8(x.data(), 40, row.data());
  for (uint8_t byte : row) EXPECT_EQ(byte, 0);
  std::vector<float> y(40, 1.0f);
  DequantizeRowQ8(row.data(), 40, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace kvfold::quant
