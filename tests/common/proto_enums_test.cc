#include "common/proto_enums.h"

#include <gtest/gtest.h>

namespace kvfold {
namespace {

TEST(ProtoEnumsTest, KvModesRoundTrip) {
  for (core::KvMode m : core::kAllKvModes) {
    const v1::KvMode proto = KvModeToProto(m);
    EXPECT_NE(proto, v1::KV_MODE_UNSPECIFIED);
    EXPECT_EQ(*KvModeFromProto(proto), m);
  }
  EXPECT_EQ(KvModeFromProto(v1::KV_MODE_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KvModeFromProto(static_cast<v1::KvMode>(42)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProtoEnumsTest, DtypesRoundTrip) {
  for (int value = v1::Dtype_MIN; value <= v1::Dtype_MAX; ++value) {
    const auto proto = static_cast<v1::Dtype>(value);
    if (proto == v1::DTYPE_UNSPECIFIED) continue;
    absl::StatusOr<core::DType> d = DTypeFromProto(proto);
    ASSERT_TRUE(d.ok()) << v1::Dtype_Name(proto);
    EXPECT_EQ(DTypeToProto(*d), proto);
  }
  EXPECT_EQ(*DTypeFromProto(v1::DTYPE_INT8), core::DType::kI8);
  EXPECT_EQ(DTypeToProto(core::DType::kQ8), v1::DTYPE_UNSPECIFIED);
  EXPECT_EQ(DTypeFromProto(v1::DTYPE_UNSPECIFIED).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvfold
