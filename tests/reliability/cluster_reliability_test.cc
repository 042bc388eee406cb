// kvfold-memory and kvfold-inference binaries together (tiny random model, memory mode)
// under hostile conditions: a flood of distinct bearer tokens, a replica on a port in use
// or without a tokens file, a store that requires mTLS. (Tenants sharing session ids:
// tests/integration/tenant_isolation_test.cc, also labelled `reliability`.)
#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "tests/integration/service_cluster.h"
#include "tests/reliability/reliability_util.h"

namespace kvfold::testing {
namespace {

constexpr int kMaxNew = 6;

std::vector<std::string> ReplicaArgs(Cluster& cluster, std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "--model=" + cluster.model_dir(), "--projector=" + cluster.dir() + "/projector",
      "--memory_store=" + cluster.store_address(), "--threads=1", "--kv_pool_bytes=67108864"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Distinct bearer tokens must not cost the replica memory per token: 8,000 callers with
// random 4 KB tokens (each forwarded to the store, which refuses them) may grow the replica
// by far less than one copy of each token and its client state (~8 KB apiece, 64 MB).
TEST(ClusterReliability, TokenSprayKeepsReplicaMemoryBounded) {
  Cluster cluster;
  const std::string& dir = cluster.MakeDir();
  WriteWholeFile(dir + "/tokens", "tok-alice alice\n");
  cluster.set_store_flags({"--tokens_file=" + dir + "/tokens"});
  std::string error;
  ASSERT_TRUE(cluster.Setup(1, &error)) << error;
  const pid_t replica = cluster.replica_process(0).pid();
  auto spray = [&](int calls, uint64_t seed) {
    std::atomic<int> unauthenticated{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
        auto stub = v1::InferenceService::NewStub(grpc::CreateChannel(
            cluster.replica_process(0).address(), grpc::InsecureChannelCredentials()));
        for (int i = t; i < calls; i += 4) {
          std::string token(4096, 'x');
          for (char& c : token) c = static_cast<char>('a' + rng() % 26);
          grpc::ClientContext context;
          context.AddMetadata("authorization", "Bearer " + token);
          v1::ListSessionsResponse out;
          const grpc::Status s = stub->ListSessions(&context, v1::ListSessionsRequest(), &out);
          if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) ++unauthenticated;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return unauthenticated.load();
  };
  EXPECT_EQ(spray(1000, 1), 1000);  // warm-up: allocator pools, channels, threads
  const int64_t before_kib = RssKib(replica);
  constexpr int kTokens = 8000;
  EXPECT_EQ(spray(kTokens, 1000), kTokens);
  const int64_t after_kib = RssKib(replica);
  std::printf("replica RSS %lld KiB -> %lld KiB after %d distinct 4 KB tokens\n",
              static_cast<long long>(before_kib), static_cast<long long>(after_kib), kTokens);
  ASSERT_GT(before_kib, 0);
  EXPECT_LT(after_kib - before_kib, 16 * 1024)
      << "replica grew by " << (after_kib - before_kib) << " KiB";
}

// A second replica on a port in use, and a replica with neither a tokens file nor
// --insecure_no_auth, both exit non-zero at once and say why.
TEST(ClusterReliability, ReplicaRefusesAPortInUseAndMissingAuth) {
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(cluster.Setup(1, &error)) << error;
  const std::string log = cluster.dir() + "/second.log";
  const int code = RunToExit(
      KVFOLD_INFERENCE_BIN,
      ReplicaArgs(cluster,
                  {"--listen=" + cluster.replica_process(0).address(), "--insecure_no_auth"}),
      log, 60);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, kStillRunning) << "the second replica kept running";
  EXPECT_NE(ReadWholeFile(log).find("cannot listen"), std::string::npos) << ReadWholeFile(log);
  const std::string log2 = cluster.dir() + "/noauth.log";
  EXPECT_EQ(RunToExit(KVFOLD_INFERENCE_BIN, ReplicaArgs(cluster, {"--listen=127.0.0.1:0"}), log2),
            2);
  EXPECT_NE(ReadWholeFile(log2).find("--insecure_no_auth"), std::string::npos)
      << ReadWholeFile(log2);
  // The first replica still serves.
  EXPECT_TRUE(cluster.Create(0, "still-up", v1::KV_MODE_MEMORY).ok());
}

// A store that requires client certificates serves a replica that presents one (its own
// store token from the environment, not argv), and refuses one that does not.
TEST(ClusterReliability, ReplicaPresentsAClientCertificateToAnMtlsStore) {
  Cluster cluster;
  const std::string& dir = cluster.MakeDir();
  if (!MakeTestCertificates(dir)) GTEST_SKIP() << "openssl CLI not available";
  WriteWholeFile(dir + "/tokens", "tok-replica tenant-r\n");
  cluster.set_store_flags({"--tokens_file=" + dir + "/tokens", "--tls_cert=" + dir + "/server.crt",
                           "--tls_key=" + dir + "/server.key",
                           "--tls_client_ca=" + dir + "/client.crt"});
  setenv("KVFOLD_STORE_TOKEN", "tok-replica", 1);
  std::string error;
  const bool up = cluster.Setup(1, &error,
                                {"--memory_store_tls_ca=" + dir + "/server.crt",
                                 "--memory_store_tls_cert=" + dir + "/client.crt",
                                 "--memory_store_tls_key=" + dir + "/client.key"});
  unsetenv("KVFOLD_STORE_TOKEN");
  ASSERT_TRUE(up) << error;
  ASSERT_TRUE(cluster.Create(0, "mtls", v1::KV_MODE_MEMORY).ok());
  const TurnResult turn = cluster.Generate(0, "mtls", PromptFor(3, 0), kMaxNew);
  ASSERT_TRUE(turn.status.ok()) << turn.status.error_message();
  EXPECT_EQ(turn.final_message.usage().memory_version(), 2u);
  // Without the client certificate the TLS handshake fails: no call reaches the store.
  ServerProcess bare;
  ASSERT_TRUE(bare.Start(KVFOLD_INFERENCE_BIN,
                         ReplicaArgs(cluster, {"--listen=127.0.0.1:0", "--insecure_no_auth",
                                               "--memory_store_tls_ca=" + dir + "/server.crt"}),
                         dir + "/bare.log"));
  auto stub = v1::InferenceService::NewStub(
      grpc::CreateChannel(bare.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::GetSessionRequest request;
  request.set_session_id("mtls");
  v1::Session session;
  EXPECT_EQ(stub->GetSession(&context, request, &session).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace kvfold::testing
