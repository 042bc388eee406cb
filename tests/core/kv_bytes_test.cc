#include "core/kv_bytes.h"

#include <gtest/gtest.h>

namespace kvfold::core {
namespace {

// Llama-3-8B's KV shape: 32 layers, 8 KV heads of 128.
KvLayout Llama(DType dtype) { return {.num_layers = 32, .kv_dim = 8 * 128, .dtype = dtype}; }

TEST(KvBytesTest, FloatDtypes) {
  EXPECT_EQ(*KvBytesPerToken(Llama(DType::kF32)), 2u * 32 * 1024 * 4);
  EXPECT_EQ(*KvBytesPerToken(Llama(DType::kF16)), 131072u);
  EXPECT_EQ(*KvBytesPerToken(Llama(DType::kBF16)), 131072u);
  EXPECT_EQ(*KvBytesPerToken(Llama(DType::kF8)), 65536u);
  EXPECT_EQ(*KvBytesPerBlock(Llama(DType::kF32)), 16u * 2 * 32 * 1024 * 4);
}

// Per layer and 16-token block: codes 2 * 16 * 1024, key scales 1024 * 2, value scales
// 16 * (1024 / 32) * 2.
TEST(KvBytesTest, Int8AndInt4CountCodesAndScales) {
  const uint64_t int8_block = 32u * (2 * 16 * 1024 + 1024 * 2 + 16 * 32 * 2);
  EXPECT_EQ(*KvBytesPerBlock(Llama(DType::kI8)), int8_block);
  EXPECT_EQ(*KvBytesPerToken(Llama(DType::kI8)), int8_block / 16);  // 71,680
  const uint64_t int4_block = 32u * (2 * 16 * 512 + 1024 * 2 + 16 * 32 * 2);
  EXPECT_EQ(*KvBytesPerToken(Llama(DType::kI4)), int4_block / 16);
  // Odd sizes: kv_dim 33, block 5, value groups of 32 -> 2 groups; rounded up per token.
  const KvLayout odd{.num_layers = 3, .kv_dim = 33, .dtype = DType::kI8, .block_size = 5};
  const uint64_t odd_block = 3u * (2 * 5 * 33 + 33 * 2 + 5 * 2 * 2);
  EXPECT_EQ(*KvBytesPerBlock(odd), odd_block);
  EXPECT_EQ(*KvBytesPerToken(odd), (odd_block + 4) / 5);
  // The value group is clamped to kv_dim, as the engine does.
  KvLayout narrow = odd;
  narrow.value_group = 1000;
  EXPECT_EQ(*KvBytesPerBlock(narrow), 3u * (2 * 5 * 33 + 33 * 2 + 5 * 1 * 2));
}

TEST(KvBytesTest, BadLayouts) {
  EXPECT_EQ(KvBytesPerToken(Llama(DType::kQ8)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KvBytesPerToken(Llama(DType::kI32)).status().code(),
            absl::StatusCode::kInvalidArgument);
  KvLayout zero = Llama(DType::kF16);
  zero.block_size = 0;
  EXPECT_EQ(KvBytesPerToken(zero).status().code(), absl::StatusCode::kInvalidArgument);
  KvLayout group = Llama(DType::kI8);
  group.value_group = 0;
  EXPECT_EQ(KvBytesPerToken(group).status().code(), absl::StatusCode::kInvalidArgument);
  const KvLayout absurd{.num_layers = 1ull << 40, .kv_dim = 1ull << 20, .dtype = DType::kF32};
  const absl::Status s = KvBytesPerToken(absurd).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overflow"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace kvfold::core
