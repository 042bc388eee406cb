// Per-tenant quotas through the real server: sessions, versions and bytes limits, forks,
// deletes, concurrent writers, a restart, ListSessions usage and the metrics gauges.
#include <atomic>
#include <thread>

#include "memory_svc/service/tenant_quotas.h"
#include "tests/memory_svc/server_fixture.h"

namespace kvfold::memory_svc::testing {
namespace {

using Code = absl::StatusCode;

TEST(TenantLimitTableTest, ParsesLimitsDefaultsAndErrors) {
  auto t = TenantLimitTable::Parse(
      "# quotas\nalice sessions=2 versions=10 bytes=1M\n"
      "* sessions=5\nbob\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->For("alice").max_sessions, 2u);
  EXPECT_EQ(t->For("alice").max_versions, 10u);
  EXPECT_EQ(t->For("alice").max_bytes, 1u << 20);
  EXPECT_EQ(t->For("carol").max_sessions, 5u);  // "*"
  EXPECT_FALSE(t->For("bob").any());            // its own line, no limits
  for (const char* bad : {"alice sessions\n", "alice sessions=x\n", "alice color=3\n",
                          "a sessions=1\na versions=2\n", "a bytes=99999999999999999999G\n"}) {
    EXPECT_EQ(TenantLimitTable::Parse(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

class QuotaTest : public ServerFixture {
 protected:
  void SetUp() override {
    config_.tokens_file = WriteFile("tokens", "tok-a alice\ntok-b bob\ntok-c carol\n");
    config_.tenants_file = WriteFile(
        "tenants", "alice sessions=2 versions=3\nbob bytes=" + std::to_string(2 * BlockBytes()) +
                       "\n* sessions=100\n");
    config_.store.versions_kept = 16;
    config_.metrics_port = -1;
    StartServer();
  }
  static uint64_t BlockBytes() { return MakeBlock(1).payload.size(); }
};

TEST_F(QuotaTest, SessionsAndVersionsLimits) {
  StoreClient alice = Client("tok-a");
  const TestBlock b = MakeBlock(1);
  ASSERT_TRUE(alice.Put("s1", 0, b.header, b.payload).ok());
  ASSERT_TRUE(alice.Put("s2", 0, b.header, b.payload).ok());
  absl::StatusOr<v1::PutBlockResponse> third = alice.Put("s3", 0, b.header, b.payload);
  EXPECT_EQ(third.status().code(), Code::kResourceExhausted);
  EXPECT_NE(third.status().message().find("sessions limit 2"), absl::string_view::npos)
      << third.status();
  // Versions: 2 in use, limit 3.
  ASSERT_TRUE(alice.Put("s1", 1, b.header, b.payload).ok());
  absl::StatusOr<v1::PutBlockResponse> more = alice.Put("s1", 2, b.header, b.payload);
  EXPECT_EQ(more.status().code(), Code::kResourceExhausted);
  EXPECT_NE(more.status().message().find("versions limit 3"), absl::string_view::npos)
      << more.status();
  // A fork is a new session and a new version.
  EXPECT_EQ(alice.Fork("s1", 0, "s4").status().code(), Code::kResourceExhausted);
  // Nothing refused was committed; deleting frees the quota.
  EXPECT_EQ(alice.GetSessionInfo("s3").status().code(), Code::kNotFound);
  EXPECT_EQ(alice.GetSessionInfo("s1")->head_version(), 2u);
  ASSERT_TRUE(alice.Delete("s2").ok());
  EXPECT_TRUE(alice.Put("s3", 0, b.header, b.payload).ok());
  // Other tenants are not affected by alice's limits.
  StoreClient carol = Client("tok-c");
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(carol.Put("c" + std::to_string(i), 0, b.header, b.payload).ok());
  }
}

TEST_F(QuotaTest, BytesLimitAndUsageReports) {
  StoreClient bob = Client("tok-b");
  const TestBlock b = MakeBlock(2);
  ASSERT_TRUE(bob.Put("x", 0, b.header, b.payload).ok());
  ASSERT_TRUE(bob.Put("x", 1, b.header, b.payload).ok());
  absl::StatusOr<v1::PutBlockResponse> over = bob.Put("y", 0, b.header, b.payload);
  EXPECT_EQ(over.status().code(), Code::kResourceExhausted);
  EXPECT_NE(over.status().message().find("bytes limit"), absl::string_view::npos) << over.status();
  absl::StatusOr<v1::StoreListSessionsResponse> list = bob.ListSessions();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_TRUE(list->has_usage());
  EXPECT_EQ(list->usage().sessions(), 1u);
  EXPECT_EQ(list->usage().versions(), 2u);
  EXPECT_EQ(list->usage().bytes(), 2 * BlockBytes());
  EXPECT_EQ(list->usage().max_bytes(), 2 * BlockBytes());
  EXPECT_EQ(list->usage().max_sessions(), 0u);
  // The metrics endpoint shows the same gauges.
  const std::string metrics = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("kvfold_memory_tenant_bytes{tenant=\"bob\"} " +
                         std::to_string(2 * BlockBytes())),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvfold_memory_tenant_sessions{tenant=\"bob\"} 1"), std::string::npos);
}

// Concurrent creators cannot overshoot together: exactly the limit succeeds.
TEST_F(QuotaTest, ConcurrentWritersStayWithinTheLimit) {
  const TestBlock b = MakeBlock(3);
  std::atomic<int> ok{0}, exhausted{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<v1::PutBlockResponse> put =
          Client("tok-a").Put("race-" + std::to_string(i), 0, b.header, b.payload);
      if (put.ok()) ++ok;
      if (put.status().code() == Code::kResourceExhausted) ++exhausted;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(exhausted.load(), 6);
}

// Usage is counted from the store after a restart, not from zero.
TEST_F(QuotaTest, LimitsHoldAcrossARestart) {
  const TestBlock b = MakeBlock(4);
  ASSERT_TRUE(Client("tok-a").Put("p1", 0, b.header, b.payload).ok());
  ASSERT_TRUE(Client("tok-a").Put("p2", 0, b.header, b.payload).ok());
  ASSERT_TRUE(server_->Shutdown(absl::Seconds(1)).ok());
  server_.reset();
  StartServer();
  EXPECT_EQ(Client("tok-a").Put("p3", 0, b.header, b.payload).status().code(),
            Code::kResourceExhausted);
  // Raising the limit (SIGHUP reload) lets it through.
  WriteFile("tenants", "alice sessions=3\n");
  ASSERT_TRUE(server_->ReloadAuth().ok());
  EXPECT_TRUE(Client("tok-a").Put("p3", 0, b.header, b.payload).ok());
}

}  // namespace
}  // namespace kvfold::memory_svc::testing
