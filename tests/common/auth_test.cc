#include "common/auth.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/common/temp_files.h"

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

class TokenFileTest : public testing::TempFilesTest {};

TEST_F(TokenFileTest, ReloadSwapsTheTableAndKeepsItOnABadFile) {
  const std::string path = Write("tokens", "tok-a alice\n");
  auto t = TokenTable::LoadFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->TenantOf("tok-a"), "alice");
  Write("tokens", "tok-b bob\n");
  ASSERT_TRUE(t->Reload().ok());
  EXPECT_EQ(t->reloads(), 1u);
  EXPECT_EQ(t->TenantOf("tok-a").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(*t->TenantOf("tok-b"), "bob");
  // A broken file is refused and the table in force stays.
  Write("tokens", "tok-c\n");
  const absl::Status bad = t->Reload();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("line 1"), absl::string_view::npos) << bad;
  EXPECT_EQ(*t->TenantOf("tok-b"), "bob");
  // A table parsed from text has no file to reload.
  auto parsed = TokenTable::Parse("x y\n");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->Reload().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(TokenFileTest, WatcherReloadsWhenTheFileChanges) {
  const std::string path = Write("tokens", "tok-a alice\n");
  auto loaded = TokenTable::LoadFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // Moved after the watcher started: the watcher must not depend on the object's address.
  loaded->WatchFile(absl::Milliseconds(20));
  TokenTable t = *std::move(loaded);
  // Replace the file the way a Secret update does: a new inode renamed over the old path.
  const std::string next = Write("tokens.next", "tok-a alice\ntok-c carol\n");
  ASSERT_EQ(std::rename(next.c_str(), path.c_str()), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!t.TenantOf("tok-c").ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(t.TenantOf("tok-c").ok());
  EXPECT_EQ(*t.TenantOf("tok-c"), "carol");
  EXPECT_GE(t.reloads(), 1u);
}

TEST_F(TokenFileTest, SecretFileIsOneTokenLine) {
  EXPECT_EQ(*ReadSecretFile(Write("s1", "tok-123\n")), "tok-123");
  EXPECT_EQ(ReadSecretFile(Write("s2", "\n")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSecretFile(Write("s3", "two words\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSecretFile(dir_ + "/absent").status().code(), absl::StatusCode::kNotFound);
}

// Lookup compares every entry in full: a token that shares a long prefix with a real one,
// or differs only in its last byte, is as unknown as any other.
TEST(TokenTableTest, NearMissesAreUnknown) {
  auto t = TokenTable::Parse("0123456789abcdef alice\n");
  ASSERT_TRUE(t.ok());
  for (const std::string bad : {"0123456789abcdeF", "0123456789abcde", "0123456789abcdef0", ""}) {
    EXPECT_EQ(t->TenantOf(bad).status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
  EXPECT_EQ(*t->TenantOf("0123456789abcdef"), "alice");
}

}  // namespace
}  // namespace kvfold
