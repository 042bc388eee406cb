// Cross-tenant isolation of the replica's session cache: kvfold-memory with a tokens file
// (tenants alice and bob), two kvfold-inference replicas with and without one. Both tenants
// own a session with the same id at the same head version; a replica that cached alice's
// copy must never continue bob's turn from it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/service_cluster.h"

namespace kvfold::testing {
namespace {

constexpr int kMaxNew = 8;
constexpr char kAlice[] = "alice-secret-token";
constexpr char kBob[] = "bob-secret-token";

class TenantIsolationTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    tokens_dir_ = MakeTempDir("kvfold-tenants-");
    ASSERT_FALSE(tokens_dir_.empty());
    const std::string tokens = tokens_dir_ + "/tokens";
    std::ofstream(tokens) << kAlice << " alice\n" << kBob << " bob\n";
    cluster_.set_store_flags({"--tokens-file=" + tokens});
    std::vector<std::string> replica_flags;
    if (GetParam()) replica_flags.push_back("--tokens-file=" + tokens);
    std::string error;
    ASSERT_TRUE(cluster_.Setup(2, &error, replica_flags)) << error;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(tokens_dir_, ec);
  }

  std::string tokens_dir_;
  Cluster cluster_;
};

TEST_P(TenantIsolationTest, SameIdAndHeadVersionNeverSharesCachedState) {
  // alice: "shared" at version 2, cached on replica 0.
  cluster_.set_bearer_token(kAlice);
  ASSERT_TRUE(cluster_.Create(0, "shared", v1::KV_MODE_MEMORY).ok());
  TurnResult alice = cluster_.Generate(0, "shared", PromptFor(1, 0, 11), kMaxNew);
  ASSERT_TRUE(alice.status.ok()) << alice.status.error_message();
  ASSERT_EQ(alice.final_message.usage().memory_version(), 2u);

  // bob: his own "shared" (and an identical "reference") at version 2, on replica 1 only.
  cluster_.set_bearer_token(kBob);
  for (const char* id : {"shared", "reference"}) {
    ASSERT_TRUE(cluster_.Create(1, id, v1::KV_MODE_MEMORY).ok()) << id;
    TurnResult r = cluster_.Generate(1, id, PromptFor(2, 0), kMaxNew);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ASSERT_EQ(r.final_message.usage().memory_version(), 2u);
  }

  // bob's next turn on replica 0, which has never seen his session: it must restore bob's
  // head from the store, not continue from alice's cached copy at the same version.
  TurnResult bob = cluster_.Generate(0, "shared", PromptFor(2, 1), kMaxNew);
  ASSERT_TRUE(bob.status.ok()) << bob.status.error_message();
  EXPECT_TRUE(bob.final_message.usage().restored_from_store());
  TurnResult expected = cluster_.Generate(1, "reference", PromptFor(2, 1), kMaxNew);
  ASSERT_TRUE(expected.status.ok()) << expected.status.error_message();
  EXPECT_EQ(bob.tokens, expected.tokens);
  v1::Session bob_session, bob_reference;
  ASSERT_TRUE(cluster_.GetSession(1, "shared", &bob_session).ok());
  ASSERT_TRUE(cluster_.GetSession(1, "reference", &bob_reference).ok());
  EXPECT_EQ(bob_session.total_tokens(), bob_reference.total_tokens());
  EXPECT_EQ(bob_session.total_tokens(), 2u * (5 + kMaxNew));

  // alice's cached copy is still hers and still used (the cache is not simply off).
  cluster_.set_bearer_token(kAlice);
  TurnResult alice_again = cluster_.Generate(0, "shared", PromptFor(1, 1), kMaxNew);
  ASSERT_TRUE(alice_again.status.ok()) << alice_again.status.error_message();
  EXPECT_FALSE(alice_again.final_message.usage().restored_from_store());
  v1::Session alice_session;
  ASSERT_TRUE(cluster_.GetSession(0, "shared", &alice_session).ok());
  EXPECT_EQ(alice_session.total_tokens(), 11u + 5 + 2 * kMaxNew);
}

INSTANTIATE_TEST_SUITE_P(ReplicaTokensFile, TenantIsolationTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "WithTokensFile" : "WithoutTokensFile";
                         });

}  // namespace
}  // namespace kvfold::testing
