#include "core/dtype.h"

#include <gtest/gtest.h>

#include <string>

#include "core/block_rules.h"

namespace kvfold::core {
namespace {

constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32,
                          DType::kI8,  DType::kQ8,  DType::kF8,   DType::kI4};

TEST(DTypeTest, EveryPrintedNameParsesBack) {
  for (DType d : kAll) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << DTypeName(d) << ": " << parsed.status();
    EXPECT_EQ(*parsed, d) << DTypeName(d);
  }
}

// Model fingerprints hash these names: they must never change.
TEST(DTypeTest, WeightNamesAreStable) {
  EXPECT_STREQ(DTypeName(DType::kF32), "f32");
  EXPECT_STREQ(DTypeName(DType::kF16), "f16");
  EXPECT_STREQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_STREQ(DTypeName(DType::kQ8), "q8");
  EXPECT_STREQ(DTypeName(DType::kI8), "int8");
}

TEST(DTypeTest, AliasesAndCase) {
  EXPECT_EQ(*ParseDType("FP16"), DType::kF16);
  EXPECT_EQ(*ParseDType("half"), DType::kF16);
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("fp32"), DType::kF32);
  EXPECT_EQ(*ParseDType("INT8"), DType::kI8);
  EXPECT_EQ(*ParseDType("i8"), DType::kI8);
  EXPECT_EQ(*ParseDType("fp8"), DType::kF8);
  EXPECT_EQ(*ParseDType(" int4 "), DType::kI4);
  const absl::Status bad = ParseDType("int3").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.message()).find("unknown dtype 'int3'"), std::string::npos) << bad;
  EXPECT_FALSE(ParseDType("").ok());
}

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI8), 1u);
  EXPECT_EQ(DTypeSize(DType::kQ8), 0u);
  EXPECT_EQ(DTypeSize(DType::kI4), 0u);
  EXPECT_EQ(DTypeBits(DType::kI4), 4);
  // A Q8 row of 33 values: 2 blocks of (fp16 scale + 32 codes).
  EXPECT_EQ(StorageBytes(DType::kQ8, 66, 33), 2u * 2 * (2 + 32));
  EXPECT_EQ(StorageBytes(DType::kI4, 7, 7), 4u);
  EXPECT_EQ(StorageBytes(DType::kF16, 6, 3), 12u);
}

TEST(BlockRulesTest, PayloadIsF16OrF32Only) {
  EXPECT_EQ(*BlockPayloadBytes(96, 4096, DType::kF16), 786432u);
  EXPECT_EQ(*BlockPayloadBytes(3, 5, DType::kF32), 60u);
  EXPECT_EQ(*BlockPayloadBytes(0, 5, DType::kF16), 0u);
  for (DType d : kAll) {
    if (d == DType::kF16 || d == DType::kF32) continue;
    EXPECT_EQ(BlockPayloadBytes(3, 5, d).status().code(), absl::StatusCode::kInvalidArgument)
        << DTypeName(d);
  }
  // 2^31 * 2^31 * 4 = 2^64 does not fit; the same shape in f16 (2^63) does.
  EXPECT_EQ(BlockPayloadBytes(1u << 31, 1u << 31, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*BlockPayloadBytes(1u << 31, 1u << 31, DType::kF16), 1ull << 63);
}

}  // namespace
}  // namespace kvfold::core
