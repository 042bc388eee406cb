// The device KIVI int8 kernels reproduce the CPU reference (kernels/quant) bit for bit.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/quant/kv_quant.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace kvfold::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::ExpectOk;
using testing::RandomFloats;

struct Case {
  int64_t num_tokens, channels;
  int32_t group_size;
  bool fp16_scales;
};

class CudaKvQuant : public ::testing::TestWithParam<Case> {};

TEST_P(CudaKvQuant, KeysAndValuesBitIdenticalToCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  auto x = RandomFloats(c.num_tokens * c.channels, 3, -4, 4);
  for (int64_t t = 0; t < c.num_tokens; ++t) x[t * c.channels] *= 30;  // outlier channel 0
  const quant::KvQuantOptions opt{.group_size = c.group_size, .fp16_scales = c.fp16_scales};
  DeviceArray<float> d_x(x);

  // Keys, per channel.
  const int64_t kgroups = quant::NumKeyGroups(c.num_tokens, c.group_size);
  std::vector<int8_t> codes(x.size());
  std::vector<float> scales(kgroups * c.channels);
  ASSERT_TRUE(quant::QuantizeKeys(x.data(), c.num_tokens, c.channels, opt, codes.data(),
                                  scales.data()).ok());
  DeviceArray<int8_t> d_codes(x.size());
  DeviceArray<float> d_scales(scales.size()), d_back(x.size());
  ExpectOk(QuantizeKeys(d_x.get(), c.num_tokens, c.channels, c.group_size, c.fp16_scales,
                        d_codes.get(), d_scales.get(), nullptr));
  EXPECT_EQ(d_codes.ToHost(), codes);
  EXPECT_EQ(d_scales.ToHost(), scales);
  ExpectOk(DequantizeKeys(d_codes.get(), d_scales.get(), c.num_tokens, c.channels,
                          c.group_size, d_back.get(), nullptr));
  std::vector<float> back(x.size());
  ASSERT_TRUE(quant::DequantizeKeys(codes.data(), scales.data(), c.num_tokens, c.channels,
                                    c.group_size, back.data()).ok());
  EXPECT_EQ(d_back.ToHost(), back);

  // Values, per token.
  const int64_t vgroups = quant::NumValueGroups(c.channels, c.group_size);
  std::vector<float> vscales(c.num_tokens * vgroups);
  ASSERT_TRUE(quant::QuantizeValues(x.data(), c.num_tokens, c.channels, opt, codes.data(),
                                    vscales.data()).ok());
  DeviceArray<float> d_vscales(vscales.size());
  ExpectOk(QuantizeValues(d_x.get(), c.num_tokens, c.channels, c.group_size, c.fp16_scales,
                          d_codes.get(), d_vscales.get(), nullptr));
  EXPECT_EQ(d_codes.ToHost(), codes);
  EXPECT_EQ(d_vscales.ToHost(), vscales);
  ExpectOk(DequantizeValues(d_codes.get(), d_vscales.get(), c.num_tokens, c.channels,
                            c.group_size, d_back.get(), nullptr));
  ASSERT_TRUE(quant::DequantizeValues(codes.data(), vscales.data(), c.num_tokens, c.channels,
                                      c.group_size, back.data()).ok());
  EXPECT_EQ(d_back.ToHost(), back);
}

INSTANTIATE_TEST_SUITE_P(OddShapes, CudaKvQuant,
                         ::testing::Values(Case{1000, 769, 16, false}, Case{5125, 64, 32, true},
                                           Case{17, 1024, 16, true}, Case{3, 5, 1, false},
                                           Case{33, 129, 128, false}));

}  // namespace
}  // namespace kvfold::kernels::cuda
