#include "core/kv_mode.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvfold::core {
namespace {

TEST(KvModeTest, NamesRoundTrip) {
  for (KvMode m : kAllKvModes) {
    absl::StatusOr<KvMode> parsed = ParseKvMode(KvModeName(m));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_STREQ(KvModeName(KvMode::kMemoryOnly), "memory_only");
}

TEST(KvModeTest, SpellingsAndErrors) {
  EXPECT_EQ(*ParseKvMode("memory-only"), KvMode::kMemoryOnly);
  EXPECT_EQ(*ParseKvMode(" Sliding "), KvMode::kSliding);
  const absl::Status bad = ParseKvMode("paged").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.message()).find("unknown mode 'paged'"), std::string::npos);
  EXPECT_FALSE(ParseKvMode("").ok());
  EXPECT_TRUE(IsMemoryMode(KvMode::kMemoryOnly));
  EXPECT_FALSE(IsMemoryMode(KvMode::kSink));
}

TEST(KvModeTest, Lists) {
  EXPECT_EQ(ParseKvModeList("all")->size(), 5u);
  const std::vector<KvMode> some = *ParseKvModeList("memory_only,full,memory-only");
  EXPECT_EQ(some, (std::vector<KvMode>{KvMode::kMemoryOnly, KvMode::kFull}));
  EXPECT_FALSE(ParseKvModeList("full,paged").ok());
  EXPECT_FALSE(ParseKvModeList("").ok());
  EXPECT_FALSE(ParseKvModeList("full,").ok());
}

}  // namespace
}  // namespace kvfold::core
