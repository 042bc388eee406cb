// Crash safety of the real kvfold-memory process: several clients stream puts, the server
// is SIGKILLed at random moments, restarted, and every acknowledged version must read back
// bit-exact with a valid checksum while no partial version exists. Ends with a SIGTERM that
// must drain and exit 0.
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "memory_svc/client/store_client.h"
#include "tests/memory_svc/put_stream.h"
#include "tests/memory_svc/server_process.h"

#ifndef KVFOLD_MEMORY_BINARY
#error "KVFOLD_MEMORY_BINARY must name the kvfold-memory binary"
#endif

namespace kvfold::memory_svc::testing {
namespace {

constexpr int kClients = 4;
constexpr int kRounds = 5;

TEST(CrashTest, AcknowledgedVersionsSurviveSigkill) {
  TempDir dir;
  const std::vector<std::string> args = {"--listen=127.0.0.1:0", "--db-dir=" + dir.path() + "/db",
                                         "--sync-writes=true", "--versions-kept=100000",
                                         "--insecure-no-auth"};
  std::mt19937 rng(20261129);
  std::vector<std::set<uint64_t>> acked(kClients);
  std::mutex mu;
  size_t total_acked = 0;
  for (int round = 0; round < kRounds; ++round) {
    ServerProcess server;
    ASSERT_TRUE(server.Start(KVFOLD_MEMORY_BINARY, args)) << "round " << round;
    const std::vector<uint64_t> heads = VerifyStreams(server.address(), acked);
    std::atomic<bool> stop{false};
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        StoreClient client = ClientFor(server.address());
        uint64_t head = heads[c];
        StorePutOptions options;
        options.chunk_bytes = 64 << 10;
        options.call.timeout = absl::Seconds(10);
        while (!stop) {
          const TestBlock b = BlockFor(c, head + 1);
          absl::StatusOr<v1::PutBlockResponse> r =
              client.Put(SessionOf(c), head, b.header, b.payload, options);
          if (!r.ok()) {
            // Only the crash may fail a put; each client owns its session, so no ABORTED.
            EXPECT_NE(r.status().code(), absl::StatusCode::kAborted) << r.status();
            EXPECT_NE(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
            break;
          }
          EXPECT_EQ(r->version(), head + 1);
          head = r->version();
          std::lock_guard<std::mutex> lock(mu);
          acked[c].insert(head);
          ++total_acked;
        }
      });
    }
    std::uniform_int_distribution<int> delay_ms(150, 900);
    absl::SleepFor(absl::Milliseconds(delay_ms(rng)));
    const int status = server.Stop(SIGKILL);
    std::printf("round %d: %zu versions acknowledged so far\n", round, total_acked);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    stop = true;
    for (std::thread& t : clients) t.join();
  }
  EXPECT_GT(total_acked, static_cast<size_t>(kRounds));  // the rounds did real work

  ServerProcess final_server;
  ASSERT_TRUE(final_server.Start(KVFOLD_MEMORY_BINARY, args));
  VerifyStreams(final_server.address(), acked);
  const int status = final_server.Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// SIGTERM while a large put is in flight: the put either completes (then it is durable) or
// fails, the process exits 0, and the DB reopens with every acknowledged version intact.
TEST(CrashTest, SigtermDrainsAndClosesCleanly) {
  TempDir dir;
  const std::vector<std::string> args = {"--listen=127.0.0.1:0", "--db-dir=" + dir.path() + "/db",
                                         "--drain-seconds=5", "--insecure-no-auth"};
  ServerProcess server;
  ASSERT_TRUE(server.Start(KVFOLD_MEMORY_BINARY, args));
  StoreClient client = ClientFor(server.address());
  const TestBlock b = BlockFor(0, 3);
  ASSERT_TRUE(client.Put(SessionOf(0), 0, b.header, b.payload).ok());
  std::atomic<bool> second_ok{false};
  std::thread writer([&] {
    const TestBlock b2 = BlockFor(0, 6);
    StorePutOptions options;
    options.chunk_bytes = 4096;  // a slow stream: 192 messages
    second_ok = client.Put(SessionOf(0), 1, b2.header, b2.payload, options).ok();
  });
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time t0 = absl::Now();
  const int status = server.Stop(SIGTERM);
  const absl::Duration stop_time = absl::Now() - t0;
  writer.join();
  std::printf("sigterm: put in flight %s, stop took %s\n", second_ok ? "completed" : "failed",
              absl::FormatDuration(stop_time).c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ServerProcess again;
  ASSERT_TRUE(again.Start(KVFOLD_MEMORY_BINARY, args));
  StoreClient after = ClientFor(again.address());
  absl::StatusOr<v1::SessionInfo> info = after.GetSessionInfo(SessionOf(0));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->latest_version(), second_ok ? 2u : info->latest_version());
  absl::StatusOr<StoreBlock> first = after.Get(SessionOf(0), 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->payload, b.payload);
  EXPECT_EQ(WEXITSTATUS(again.Stop(SIGTERM)), 0);
}

TEST(BinaryTest, BadConfigurationExitsWithCode2) {
  TempDir dir;
  const std::string db = "--db-dir=" + dir.path() + "/db";
  const std::string insecure = "--insecure-no-auth";
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, {}), 2);  // --db-dir missing
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, {db}), 2);  // neither tokens nor --insecure-no-auth
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, {db, insecure, "--listen=no-port"}), 2);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, {db, "--tokens-file=" + dir.path() + "/none"}), 2);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, {db, insecure, "--tls-cert=" + dir.path() + "/x.crt"}),
            2);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, {db, insecure, "--versions-kept=0"}), 2);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, {db, insecure, "--metrics-port=-5"}), 2);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, {db, insecure, "--log-level=loud"}), 2);
}

// --log-level reaches the request log: one JSON line per call at info, none when off.
TEST(BinaryTest, LogLevelGovernsTheRequestLog) {
  for (const std::string level : {"info", "off"}) {
    TempDir dir;
    const std::string log = dir.path() + "/stderr.log";  // request logs go to stderr
    kvfold::testing::ServerProcess server;
    ASSERT_TRUE(server.Start(KVFOLD_MEMORY_BINARY,
                             {"--listen=127.0.0.1:0", "--db-dir=" + dir.path() + "/db",
                              "--insecure-no-auth", "--log-level=" + level},
                             log, 30));
    StoreClient client = ClientFor(server.address());
    ASSERT_TRUE(client.ListSessions().ok());
    EXPECT_EQ(server.Kill(SIGINT), 0);
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const bool logged = text.find("MemoryStore/ListSessions") != std::string::npos;
    EXPECT_EQ(logged, level == "info") << level << ":\n" << text;
  }
}

TEST(BinaryTest, FlagsReachTheServer) {
  TempDir dir;
  std::ofstream(dir.path() + "/tokens") << "tok-a tenant-a\n";
  ServerProcess server;
  ASSERT_TRUE(server.Start(KVFOLD_MEMORY_BINARY,
                           {"--listen=127.0.0.1:0", "--db-dir=" + dir.path() + "/db",
                            "--tokens-file=" + dir.path() + "/tokens", "--versions-kept=2",
                            "--max-block-bytes=100000", "--sync-writes=false"}));
  StoreClient anonymous = ClientFor(server.address());
  EXPECT_EQ(anonymous.ListSessions().status().code(), absl::StatusCode::kUnauthenticated);
  StoreClient client(grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()),
                     "tok-a");
  for (uint64_t v = 1; v <= 4; ++v) {
    const TestBlock b = BlockFor(1, v * 3 + 1);  // 48 KB blocks
    ASSERT_TRUE(client.Put("flags", v - 1, b.header, b.payload).ok());
  }
  EXPECT_EQ(client.ListVersions("flags")->versions_size(), 2);  // --versions-kept=2
  const TestBlock big = BlockFor(1, 3);                            // 768 KiB > 100000
  EXPECT_EQ(client.Put("flags", 4, big.header, big.payload).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(server.Stop(SIGINT), 0);
}

}  // namespace
}  // namespace kvfold::memory_svc::testing
