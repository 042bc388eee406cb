#include "common/auth.h"

#include <gtest/gtest.h>

namespace kvfold {
namespace {

TEST(TokenTableTest, ParsesPairsCommentsAndBlankLines) {
  auto t = TokenTable::Parse("# tokens\nsecret-a alice\n\n  secret-b\tbob  # trailing\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 2u);
  EXPECT_EQ(*t->TenantOf("secret-a"), "alice");
  EXPECT_EQ(*t->TenantOf("secret-b"), "bob");
  EXPECT_EQ(t->TenantOf("nope").status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(TokenTableTest, RejectsMalformedLinesAndDuplicates) {
  EXPECT_EQ(TokenTable::Parse("only-token\n").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenTable::Parse("a b c\n").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenTable::Parse("a x\na y\n").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenTable::LoadFile("/nonexistent/tokens").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvfold
