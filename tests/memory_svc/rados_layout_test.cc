// The RADOS backend's object names and version entries (no cluster needed).
#include "memory_svc/store/rados_layout.h"

#include <gtest/gtest.h>

#include "tests/memory_svc/test_blocks.h"

namespace kvfold::memory_svc::rados_layout {
namespace {

TEST(RadosLayoutTest, PayloadNamesRoundTripAndAreUnambiguous) {
  // '.' inside tenant and session must not shift the fields.
  for (const auto& [tenant, session] :
       std::vector<std::pair<std::string, std::string>>{{"a", "b.c"}, {"a.b", "c"},
                                                        {"t", "s p a c e"}, {"x.1.y", "9.."}}) {
    const std::string name = PayloadObject(tenant, session, 0x1234, 0xfedcba9876543210ull);
    std::optional<PayloadName> parsed = ParsePayloadObject(name);
    ASSERT_TRUE(parsed.has_value()) << name;
    EXPECT_EQ(parsed->tenant, tenant);
    EXPECT_EQ(parsed->session_id, session);
    EXPECT_EQ(parsed->version, 0x1234u);
    EXPECT_EQ(parsed->nonce, 0xfedcba9876543210ull);
  }
  EXPECT_NE(HeadObject("a", "b.c"), HeadObject("a.b", "c"));
  EXPECT_NE(PayloadObject("a", "b.c", 1, 1), PayloadObject("a.b", "c", 1, 1));
}

TEST(RadosLayoutTest, OtherNamesAreNotPayloads) {
  for (const std::string& name :
       {HeadObject("t", "s"), IndexObject("t"), std::string(kTenantsObject), std::string("p."),
        std::string("p.1.t.1.s.0000000000000001"), std::string("p.9.t.1.s.x.y"),
        PayloadObject("t", "s", 1, 2) + "x", std::string("p.1.t.1.s.000000000000000G.0")}) {
    EXPECT_FALSE(ParsePayloadObject(name).has_value()) << name;
  }
}

TEST(RadosLayoutTest, VersionKeysSortNumerically) {
  EXPECT_LT(VersionKey(9), VersionKey(10));
  EXPECT_LT(VersionKey(0xff), VersionKey(0x100));
  EXPECT_EQ(VersionKey(1).size(), 17u);
}

TEST(RadosLayoutTest, VersionEntryRoundTripAndDamage) {
  const testing::TestBlock b = testing::MakeBlock(7, 5, 33, v1::DTYPE_INT8);
  const std::string bytes = EncodeVersionEntry(42, {1234, b.header});
  absl::StatusOr<VersionEntry> entry = DecodeVersionEntry(bytes);
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->nonce, 42u);
  EXPECT_EQ(entry->record.created_unix_ms, 1234);
  EXPECT_EQ(entry->record.header.SerializeAsString(), b.header.SerializeAsString());
  EXPECT_EQ(*DecodeVersionNonce(bytes), 42u);
  EXPECT_EQ(DecodeVersionEntry(bytes.substr(0, 5)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeVersionEntry(bytes.substr(0, 9)).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvfold::memory_svc::rados_layout
