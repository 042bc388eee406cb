// ggml's block-quantized types decoded: golden checksums of pseudo-random blocks computed
// by an independent implementation of the formats (llama.cpp's gguf-py, numpy), hand-built
// blocks against their formulas, and the exact Q8 repack of Q4_0, Q5_0, Q8_0 and IQ4_NL.
#include "kernels/quant/ggml_blocks.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "common/gguf.h"
#include "core/dtype.h"
#include "gtest/gtest.h"
#include "kernels/quant/weight_q8.h"
#include "tests/kernels/quant/ggml_test_blocks.h"

namespace kvfold::quant {
namespace {

using gguf::TensorType;
using testing::PseudoRandomGgmlBlocks;

constexpr int64_t kElements = 1024;

std::vector<float> Decode(TensorType type, const std::string& bytes, int64_t n) {
  std::vector<float> out(n);
  DequantizeGgmlBlocks(static_cast<uint32_t>(type), reinterpret_cast<const uint8_t*>(bytes.data()),
                       n, out.data());
  return out;
}

// For 1,024 elements of PseudoRandomGgmlBlocks(type, 1024): sum (i + 1) v[i], sum v[i]^2,
// v[0] and v[1023], from gguf-py's `quants.dequantize` (llama.cpp c392e5094) on the same
// bytes. The weighted sum moves with any misplaced element, the square sum with any wrong
// scale or code.
struct Golden {
  TensorType type;
  double weighted_sum;
  double square_sum;
  float first;
  float last;
};
constexpr Golden kGolden[] = {
    {TensorType::kQ4_0, -2507.9887161254883, 3.4179966205265373, 0.0078125f, -0.1225128173828125f},
    {TensorType::kQ4_1, 51167.08369445801, 11.427331889048219, 0.05859375f, 0.21498870849609375f},
    {TensorType::kQ5_0, -2414.383857727051, 13.283479812846053, -0.0859375f, 0.2275238037109375f},
    {TensorType::kQ5_1, 107664.81218719482, 49.356387162348256, 0.18359375f, 0.26749420166015625f},
    {TensorType::kQ8_0, 5181.3203048706055, 877.7421641324763, 0.0390625f, -1.645172119140625f},
    {TensorType::kQ2_K, 81953.41876983643, 33.48963305493817, 0.046875f, 0.2755165100097656f},
    {TensorType::kQ3_K, -6953.77555847168, 133.07678928936366, -0.1484375f, 1.1083984375f},
    {TensorType::kQ4_K, 1001881.3720169067, 6593.807743372978, 3.63671875f, 0.9077796936035156f},
    {TensorType::kQ5_K, 2587843.241004944, 37187.35158702143, 3.01953125f, 0.13696670532226562f},
    {TensorType::kQ6_K, -175735.43342590332, 110587.61879107077, 2.484375f, -7.767448425292969f},
    {TensorType::kIQ4_NL, -43332.64072418213, 749.9419164673891, 0.4140625f, -1.4526519775390625f},
    {TensorType::kIQ4_XS, 88916.66868591309, 91182.2735759014, 3.859375f, 1.8011474609375f},
};

TEST(GgmlBlocksTest, DecodesAsAnotherImplementationOfTheFormats) {
  for (const Golden& g : kGolden) {
    const uint32_t type = static_cast<uint32_t>(g.type);
    SCOPED_TRACE(gguf::TensorTypeName(type));
    ASSERT_TRUE(IsGgmlBlockType(type));
    const std::vector<float> v = Decode(g.type, PseudoRandomGgmlBlocks(type, kElements), kElements);
    double weighted = 0, squares = 0;
    for (int64_t i = 0; i < kElements; ++i) {
      weighted += static_cast<double>(i + 1) * v[i];
      squares += static_cast<double>(v[i]) * v[i];
    }
    // Both sides compute each element in float with the same operations; the sums are
    // taken in double from those floats.
    EXPECT_NEAR(weighted, g.weighted_sum, 1e-9 * std::abs(g.weighted_sum));
    EXPECT_NEAR(squares, g.square_sum, 1e-9 * g.square_sum);
    EXPECT_EQ(v.front(), g.first);
    EXPECT_EQ(v.back(), g.last);
  }
}

uint16_t Half(float x) { return Fp32ToFp16(x); }

void PutHalf(std::string* b, int offset, float x) {
  const uint16_t h = Half(x);
  std::memcpy(b->data() + offset, &h, 2);
}

TEST(GgmlBlocksTest, HandBuiltBlocksDecodeToTheirFormulas) {
  // Q4_0, d = 0.5: byte j holds element j (low nibble) and j + 16 (high).
  std::string q4(18, '\0');
  PutHalf(&q4, 0, 0.5f);
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<char>(j | ((15 - j) << 4));
  const std::vector<float> y4 = Decode(TensorType::kQ4_0, q4, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y4[j], 0.5f * static_cast<float>(j - 8));
    EXPECT_EQ(y4[j + 16], 0.5f * static_cast<float>(7 - j));
  }

  // Q4_K, d = 1, dmin = 0.25: 6-bit scales 5 + 7 j and minima 60 - 3 j packed as ggml packs
  // them (sub-blocks 4..7 keep their top two bits in the top bits of bytes 0..7).
  std::string k4(144, '\0');
  PutHalf(&k4, 0, 1.0f);
  PutHalf(&k4, 2, 0.25f);
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = 5 + 7 * j;
    mn[j] = 60 - 3 * j;
  }
  uint8_t* s = reinterpret_cast<uint8_t*>(k4.data() + 4);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      k4[16 + 32 * c + l] = static_cast<char>((l % 16) | ((15 - l % 16) << 4));
  const std::vector<float> yk = Decode(TensorType::kQ4_K, k4, 256);
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) {
      const int q = j % 2 == 0 ? l % 16 : 15 - l % 16;
      EXPECT_EQ(yk[32 * j + l], static_cast<float>(sc[j] * q) - 0.25f * static_cast<float>(mn[j]))
          << "sub-block " << j << " element " << l;
    }

  // Q3_K: a set hmask bit means no -4 offset; scale byte 0's low nibble and byte 8's low
  // bits make sub-block 0's scale ((3 | 2 << 4) - 32 = 3).
  std::string k3(110, '\0');
  PutHalf(&k3, 108, 2.0f);
  k3[96] = 3;
  k3[96 + 8] = 2;
  k3[32] = 1;  // element 0: low bits 1
  k3[0] = 1;   // element 0's high bit set: code 1
  k3[1] = 0;   // element 1: code 0 - 4
  const std::vector<float> y3 = Decode(TensorType::kQ3_K, k3, 256);
  EXPECT_EQ(y3[0], 2.0f * 3 * 1);
  EXPECT_EQ(y3[1], 2.0f * 3 * -4);
  EXPECT_EQ(y3[16], 2.0f * -32 * -4);  // sub-block 1: scale 0 - 32
}

TEST(GgmlBlocksTest, SymmetricTypesRepackToTheSameNumbers) {
  for (TensorType type :
       {TensorType::kQ4_0, TensorType::kQ5_0, TensorType::kQ8_0, TensorType::kIQ4_NL}) {
    const uint32_t t = static_cast<uint32_t>(type);
    SCOPED_TRACE(gguf::TensorTypeName(t));
    ASSERT_TRUE(RepacksToQ8Exactly(t));
    for (int64_t cols : {32, 96, 1024}) {
      const std::string bytes = PseudoRandomGgmlBlocks(t, cols, 77);
      std::vector<uint8_t> row(core::Q8RowBytes(cols));
      RepackGgmlRowToQ8(t, reinterpret_cast<const uint8_t*>(bytes.data()), cols, row.data());
      std::vector<float> repacked(cols);
      DequantizeRowQ8(row.data(), cols, repacked.data());
      EXPECT_EQ(repacked, Decode(type, bytes, cols)) << cols << " columns";
    }
  }
  for (TensorType type :
       {TensorType::kQ4_1, TensorType::kQ5_1, TensorType::kQ2_K, TensorType::kQ3_K,
        TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kIQ4_XS}) {
    EXPECT_FALSE(RepacksToQ8Exactly(static_cast<uint32_t>(type)));
  }
  EXPECT_FALSE(IsGgmlBlockType(static_cast<uint32_t>(TensorType::kF16)));
  EXPECT_FALSE(IsGgmlBlockType(16));  // IQ2_XXS
}

}  // namespace
}  // namespace kvfold::quant
