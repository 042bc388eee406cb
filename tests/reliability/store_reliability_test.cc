// The real kvfold-memory binary under hostile conditions: a port already in use, no tokens
// file, malformed requests, racing compare-and-set writers, tokens and tenants files
// changed while it serves. Each test starts its own process on a free loopback port.
#include <grpcpp/create_channel.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "memory_svc/client/store_client.h"
#include "tests/memory_svc/test_blocks.h"
#include "tests/reliability/reliability_util.h"

namespace kvfold::testing {
namespace {

using memory_svc::testing::MakeBlock;
using memory_svc::testing::TempDir;
using memory_svc::testing::TestBlock;
using Code = absl::StatusCode;
using memory_svc::SealBlockHeader;
using memory_svc::StoreBlock;
using memory_svc::StoreClient;

memory_svc::StoreClient ClientOf(const std::string& address, const std::string& token = "") {
  return memory_svc::StoreClient(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), token);
}

std::vector<std::string> StoreArgs(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--listen=127.0.0.1:0", "--db-dir=" + dir + "/db",
                                   "--sync-writes=false"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

grpc::Status RawUnary(const std::string& address, const std::string& method,
                      const std::string& bytes) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::Slice slice(bytes);
  grpc::ByteBuffer in(&slice, 1), out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(),
      grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC), &context,
      in, &out);
}

// A second store on a port in use exits non-zero and says why; every connection keeps
// reaching the first store's database (with SO_REUSEPORT the kernel split them).
TEST(StoreReliability, SecondStoreOnAPortInUseRefusesToStart) {
  TempDir a, b;
  ServerProcess first;
  ASSERT_TRUE(first.Start(KVFOLD_MEMORY_BIN, StoreArgs(a.path(), {"--insecure-no-auth"}),
                          a.path() + "/memory.log", 30));
  const TestBlock block = MakeBlock(1);
  ASSERT_TRUE(ClientOf(first.address()).Put("s", 0, block.header, block.payload).ok());
  const std::string log = b.path() + "/second.log";
  const int code = RunToExit(
      KVFOLD_MEMORY_BIN,
      {"--listen=" + first.address(), "--db-dir=" + b.path() + "/db", "--insecure-no-auth"}, log);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, kStillRunning) << "the second store kept running";
  EXPECT_NE(ReadWholeFile(log).find("cannot listen on " + first.address()), std::string::npos)
      << ReadWholeFile(log);
  for (int i = 0; i < 20; ++i) {  // fresh connections: none may land elsewhere
    absl::StatusOr<v1::SessionInfo> info = ClientOf(first.address()).GetSessionInfo("s");
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->head_version(), 1u);
  }
}

TEST(StoreReliability, NoTokensFileRefusesToStartUnlessInsecureIsExplicit) {
  TempDir dir;
  const std::string log = dir.path() + "/memory.log";
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BIN, StoreArgs(dir.path(), {}), log), 2);
  EXPECT_NE(ReadWholeFile(log).find("--insecure-no-auth"), std::string::npos) << ReadWholeFile(log);
}

// Malformed requests get precise codes with messages, and the store keeps serving.
TEST(StoreReliability, BadInputIsRejectedAndTheStoreKeepsServing) {
  TempDir dir;
  ServerProcess store;
  ASSERT_TRUE(store.Start(
      KVFOLD_MEMORY_BIN, StoreArgs(dir.path(), {"--insecure-no-auth", "--max-block-bytes=1048576"}),
      dir.path() + "/memory.log", 30));
  const std::string& address = store.address();
  memory_svc::StoreClient client = ClientOf(address);
  // Undecodable bytes and a session id that is not UTF-8.
  for (const std::string& bytes :
       {std::string("\xff\xff\xff\xff\x0f", 5), std::string("\x0a\x02\xc3\x28", 4)}) {
    const grpc::Status s = RawUnary(address, "/kvfold.v1.MemoryStore/GetSessionInfo", bytes);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_FALSE(s.error_message().empty());
  }
  // mem_slots x hidden_size x 4 bytes wraps 64 bits to 0: not "an empty block".
  TestBlock overflow = MakeBlock(2);
  overflow.header.set_mem_slots(1u << 31);
  overflow.header.set_hidden_size(1u << 31);
  overflow.header.set_dtype(v1::DTYPE_FP32);
  memory_svc::testing::TestBlock empty = overflow;
  empty.payload.clear();
  SealBlockHeader(&empty.header, empty.payload);
  absl::StatusOr<v1::PutBlockResponse> put = client.Put("overflow", 0, empty.header, "");
  EXPECT_EQ(put.status().code(), Code::kInvalidArgument) << put.status();
  // A 2 MB header (window ids) with a tiny payload is over a 1 MiB block limit.
  TestBlock big = MakeBlock(3);
  for (int i = 0; i < 500000; ++i) big.header.add_window_token_ids(1000000 + i);
  SealBlockHeader(&big.header, big.payload);
  put = client.Put("big-header", 0, big.header, big.payload);
  EXPECT_EQ(put.status().code(), Code::kResourceExhausted) << put.status();
  EXPECT_EQ(client.GetSessionInfo("big-header").status().code(), Code::kNotFound);
  // Still serving.
  const TestBlock ok = MakeBlock(4);
  EXPECT_TRUE(client.Put("fine", 0, ok.header, ok.payload).ok());
  EXPECT_EQ(store.Kill(SIGTERM), 0);
}

// Writers race compare-and-set on one session: the versions are gap-free, every
// acknowledged version reads back bit-exact, and each loser got ABORTED.
TEST(StoreReliability, CompareAndSetRaceLosesNothing) {
  TempDir dir;
  ServerProcess store;
  ASSERT_TRUE(store.Start(KVFOLD_MEMORY_BIN,
                          StoreArgs(dir.path(), {"--insecure-no-auth", "--versions-kept=100000"}),
                          dir.path() + "/memory.log", 30));
  constexpr int kWriters = 6;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::mutex mu;
  std::map<uint64_t, TestBlock> acked;  // version -> block
  std::atomic<int> aborted{0}, other_errors{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      memory_svc::StoreClient client = ClientOf(store.address());
      uint64_t seed = static_cast<uint64_t>(w) << 32;
      while (std::chrono::steady_clock::now() < end) {
        absl::StatusOr<v1::SessionInfo> info = client.GetSessionInfo("race");
        const uint64_t head = info.ok() ? info->head_version() : 0;
        const TestBlock b = MakeBlock(++seed);
        absl::StatusOr<v1::PutBlockResponse> put = client.Put("race", head, b.header, b.payload);
        if (put.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          acked.emplace(put->version(), b);
        } else if (put.status().code() == Code::kAborted ||
                   put.status().code() == Code::kAlreadyExists) {
          ++aborted;
        } else if (!(head == 0 && put.status().code() == Code::kNotFound)) {
          ++other_errors;
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(other_errors.load(), 0);
  ASSERT_FALSE(acked.empty());
  memory_svc::StoreClient client = ClientOf(store.address());
  absl::StatusOr<v1::SessionInfo> info = client.GetSessionInfo("race");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->latest_version(), acked.size());  // no gap, no lost acknowledgement
  uint64_t expected = 1;
  for (const auto& [version, block] : acked) {
    EXPECT_EQ(version, expected++);
    absl::StatusOr<StoreBlock> read = client.Get("race", version);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->payload, block.payload);
    EXPECT_EQ(read->header.checksum(), block.header.checksum());
  }
  std::printf("CAS race: %zu versions acknowledged, %d lost races\n", acked.size(), aborted.load());
}

// Replaces `path` the way a Kubernetes Secret volume update does: `path` is a symlink to
// ..data/<name>, ..data a symlink to a versioned directory; the update writes a new
// directory and renames a new ..data symlink over the old one.
void SwapSecret(const std::string& dir, const std::string& name, const std::string& text,
                int version) {
  const std::string versioned = "..v" + std::to_string(version);
  std::filesystem::create_directories(dir + "/" + versioned);
  WriteWholeFile(dir + "/" + versioned + "/" + name, text);
  std::filesystem::create_directory_symlink(versioned, dir + "/..data_tmp");
  std::filesystem::rename(dir + "/..data_tmp", dir + "/..data");
}

bool Authenticates(const std::string& address, const std::string& token) {
  return ClientOf(address, token).ListSessions().ok();
}

// SIGHUP reloads the tokens file at once; without a signal, a change is noticed within
// seconds: an edit in place, a Kubernetes Secret update (symlink swap), a removed token
// (refused), and a broken file (the tokens in force stay, the log says why).
TEST(StoreReliability, TokensFileReloadsOnSighupAndOnChange) {
  TempDir dir;
  const std::string tokens = dir.path() + "/tokens";
  WriteWholeFile(tokens, "tok-a alice\n");
  ServerProcess store;
  const std::string log = dir.path() + "/memory.log";
  ASSERT_TRUE(store.Start(KVFOLD_MEMORY_BIN, StoreArgs(dir.path(), {"--tokens-file=" + tokens}),
                          log, 30));
  const std::string address = store.address();
  EXPECT_TRUE(Authenticates(address, "tok-a"));
  EXPECT_EQ(ClientOf(address, "tok-b").ListSessions().status().code(), Code::kUnauthenticated);
  WriteWholeFile(tokens, "tok-b bob\n");
  ASSERT_EQ(kill(store.pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitFor([&] { return Authenticates(address, "tok-b"); }));
  EXPECT_EQ(ClientOf(address, "tok-a").ListSessions().status().code(), Code::kUnauthenticated);
  // No signal from here on: the file watcher notices each change within ~1 s.
  WriteWholeFile(tokens, "tok-c carol\n");  // in place, same size
  EXPECT_TRUE(WaitFor([&] { return Authenticates(address, "tok-c"); }, 5));
  EXPECT_FALSE(Authenticates(address, "tok-b")) << "a removed token still works";
  // A broken file: refused, logged, and the tokens in force keep working.
  WriteWholeFile(tokens, "tok-d\n");
  EXPECT_TRUE(WaitFor([&] { return ReadWholeFile(log).find("not reloaded") != std::string::npos; }, 5));
  EXPECT_TRUE(Authenticates(address, "tok-c"));
  EXPECT_FALSE(Authenticates(address, "tok-d"));
  EXPECT_EQ(store.Kill(SIGTERM), 0);
}

// A tokens file and a tenants file mounted as Kubernetes Secret volumes: both follow an
// update of the volume (a symlink swap) without a signal.
TEST(StoreReliability, SecretVolumeUpdatesReloadTokensAndTenants) {
  TempDir dir;
  const std::string secrets = dir.path() + "/secrets";
  std::filesystem::create_directories(secrets);
  SwapSecret(secrets, "tokens", "tok-a alice\n", 1);
  std::filesystem::create_symlink("..data/tokens", secrets + "/tokens");
  const std::string config = dir.path() + "/config";
  std::filesystem::create_directories(config);
  SwapSecret(config, "tenants", "alice sessions=1\n", 1);
  std::filesystem::create_symlink("..data/tenants", config + "/tenants");
  ServerProcess store;
  ASSERT_TRUE(store.Start(KVFOLD_MEMORY_BIN,
                          StoreArgs(dir.path(), {"--tokens-file=" + secrets + "/tokens",
                                                 "--tenants-file=" + config + "/tenants"}),
                          dir.path() + "/memory.log", 30));
  const std::string address = store.address();
  const TestBlock block = MakeBlock(1);
  StoreClient alice = ClientOf(address, "tok-a");
  ASSERT_TRUE(alice.Put("one", 0, block.header, block.payload).ok());
  EXPECT_EQ(alice.Put("two", 0, block.header, block.payload).status().code(),
            Code::kResourceExhausted);
  SwapSecret(secrets, "tokens", "tok-b alice\n", 2);  // alice's token rotated
  SwapSecret(config, "tenants", "alice sessions=2\n", 2);
  EXPECT_TRUE(WaitFor([&] { return Authenticates(address, "tok-b"); }, 5));
  EXPECT_FALSE(Authenticates(address, "tok-a")) << "the rotated-out token still works";
  StoreClient rotated = ClientOf(address, "tok-b");
  EXPECT_TRUE(WaitFor([&] { return rotated.Put("two", 0, block.header, block.payload).ok(); }, 5))
      << "the raised session limit was not picked up";
  EXPECT_EQ(rotated.Put("three", 0, block.header, block.payload).status().code(),
            Code::kResourceExhausted);
  EXPECT_EQ(store.Kill(SIGTERM), 0);
}

}  // namespace
}  // namespace kvfold::testing
