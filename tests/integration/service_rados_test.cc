// The demo's session on a memory store on Ceph RADOS: two inference replicas, each with its
// own kvfold-memory process, both on one pool (the CTest fixture's cluster,
// scripts/ceph_dev.sh). A memory-mode session alternating replicas resumes through RADOS
// and matches the same session on one replica; then the store process is SIGKILLed and a
// fresh one (no state of its own) serves the session on from the pool.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "absl/strings/str_format.h"
#include "tests/integration/service_cluster.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::testing {
namespace {

constexpr int kMaxNew = 24;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

TEST(ServiceRadosTest, DemoSessionResumesThroughRados) {
  const std::string conf = Env("KVFOLD_CEPH_CONF");
  if (conf.empty() || !std::filesystem::exists(conf)) {
    GTEST_SKIP() << "no Ceph test cluster (KVFOLD_CEPH_CONF unset or no such file): ctest -L "
                    "ceph starts one when the Ceph packages are installed";
  }
  std::random_device rd;
  const std::string name_space = absl::StrFormat("it-%08x", rd());
  const std::vector<std::string> rados = {"--backend=rados", "--ceph-conf=" + conf,
                                          "--pool=" + Env("KVFOLD_CEPH_POOL"),
                                          "--rados-namespace=" + name_space,
                                          "--ceph-keyring=" + Env("KVFOLD_CEPH_KEYRING")};
  // The demo's model when ../shared has it, else the tiny random one.
  const std::string stories = Stories260K() + "/stories260K.bin";
  const std::string model = std::filesystem::exists(stories) ? stories : "";

  // Replica 0 and its store; replica 1 gets a second store process on the same pool.
  Cluster cluster;
  cluster.set_store_flags(rados);
  std::string error;
  ASSERT_TRUE(cluster.Setup(1, &error, {}, model)) << error;
  Cluster second;
  second.set_store_flags(rados);
  ASSERT_TRUE(second.Setup(1, &error, {}, model)) << error;
  auto replica = [&](int i) -> Cluster& { return i == 0 ? cluster : second; };

  ASSERT_TRUE(cluster.Create(0, "one", v1::KV_MODE_MEMORY).ok());
  ASSERT_TRUE(cluster.Create(0, "two", v1::KV_MODE_MEMORY).ok());
  constexpr int kTurns = 6;
  for (int t = 0; t < kTurns; ++t) {
    if (t == 4) {
      // The store behind replica 1 dies; a fresh process takes its port and serves on.
      second.store().Kill(SIGKILL);
      ASSERT_TRUE(second.StartStore());
      second.replica_process(0).Kill(SIGKILL);  // and its session cache with it
      ASSERT_TRUE(second.StartReplica(0));
    }
    TurnResult a = cluster.Generate(0, "one", PromptFor(9, t), kMaxNew);
    TurnResult b = replica(t % 2).Generate(0, "two", PromptFor(9, t), kMaxNew);
    ASSERT_TRUE(a.status.ok()) << "turn " << t << ": " << a.status.error_message();
    ASSERT_TRUE(b.status.ok()) << "turn " << t << ": " << b.status.error_message();
    EXPECT_EQ(a.tokens, b.tokens) << "turn " << t;
  }
  v1::Session one, two;
  ASSERT_TRUE(second.GetSession(0, "one", &one).ok());
  ASSERT_TRUE(second.GetSession(0, "two", &two).ok());
  EXPECT_EQ(one.total_tokens(), two.total_tokens());
  EXPECT_EQ(one.tokens_folded(), two.tokens_folded());
  EXPECT_GT(two.tokens_folded(), 0u);
  EXPECT_EQ(two.head_version(), 1u + kTurns);  // create + one version per turn
}

}  // namespace
}  // namespace kvfold::testing
