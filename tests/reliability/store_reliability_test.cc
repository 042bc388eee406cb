// The real kvfold-memory binary under hostile conditions: a port already in use, no tokens
// file, malformed requests, racing compare-and-set writers, a tokens file changed while it
// serves. Each test starts its own process on a free loopback port.
#include <grpcpp/create_channel.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "memory_svc/client/store_client.h"
#include "tests/memory_svc/test_blocks.h"
#include "tests/reliability/reliability_util.h"

namespace kvfold::testing {
namespace {

using memory::testing::MakeBlock;
using memory::testing::TempDir;
using memory::testing::TestBlock;
using Code = absl::StatusCode;

StoreClient ClientOf(const std::string& address, const std::string& token = "") {
  return StoreClient(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), token);
}

std::vector<std::string> StoreArgs(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--listen=127.0.0.1:0", "--db_dir=" + dir + "/db",
                                   "--sync_writes=false"};
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
  ASSERT_TRUE(first.Start(KVFOLD_MEMORY_BIN, StoreArgs(a.path(), {"--insecure_no_auth"}),
                          a.path() + "/memory.log", 30));
  const TestBlock block = MakeBlock(1);
  ASSERT_TRUE(ClientOf(first.address()).Put("s", 0, block.header, block.payload).ok());
  const std::string log = b.path() + "/second.log";
  const int code = RunToExit(
      KVFOLD_MEMORY_BIN,
      {"--listen=" + first.address(), "--db_dir=" + b.path() + "/db", "--insecure_no_auth"}, log);
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
  EXPECT_NE(ReadWholeFile(log).find("--insecure_no_auth"), std::string::npos) << ReadWholeFile(log);
}

// Malformed requests get precise codes with messages, and the store keeps serving.
TEST(StoreReliability, BadInputIsRejectedAndTheStoreKeepsServing) {
  TempDir dir;
  ServerProcess store;
  ASSERT_TRUE(store.Start(
      KVFOLD_MEMORY_BIN, StoreArgs(dir.path(), {"--insecure_no_auth", "--max_block_bytes=1048576"}),
      dir.path() + "/memory.log", 30));
  const std::string& address = store.address();
  StoreClient client = ClientOf(address);
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
  memory::testing::TestBlock empty = overflow;
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
                          StoreArgs(dir.path(), {"--insecure_no_auth", "--versions_kept=100000"}),
                          dir.path() + "/memory.log", 30));
  constexpr int kWriters = 6;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::mutex mu;
  std::map<uint64_t, TestBlock> acked;  // version -> block
  std::atomic<int> aborted{0}, other_errors{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      StoreClient client = ClientOf(store.address());
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
  StoreClient client = ClientOf(store.address());
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

// SIGHUP reloads the tokens file at once; an edit alone is noticed within seconds.
TEST(StoreReliability, TokensFileReloadsOnSighupAndOnChange) {
  TempDir dir;
  const std::string tokens = dir.path() + "/tokens";
  WriteWholeFile(tokens, "tok-a alice\n");
  ServerProcess store;
  ASSERT_TRUE(store.Start(KVFOLD_MEMORY_BIN, StoreArgs(dir.path(), {"--tokens_file=" + tokens}),
                          dir.path() + "/memory.log", 30));
  EXPECT_TRUE(ClientOf(store.address(), "tok-a").ListSessions().ok());
  EXPECT_EQ(ClientOf(store.address(), "tok-b").ListSessions().status().code(),
            Code::kUnauthenticated);
  WriteWholeFile(tokens, "tok-b bob\n");
  ASSERT_EQ(kill(store.pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitFor([&] { return ClientOf(store.address(), "tok-b").ListSessions().ok(); }));
  EXPECT_EQ(ClientOf(store.address(), "tok-a").ListSessions().status().code(),
            Code::kUnauthenticated);
  // No signal this time: the file watcher notices the change.
  WriteWholeFile(tokens, "tok-b bob\ntok-c carol\n");
  EXPECT_TRUE(WaitFor([&] { return ClientOf(store.address(), "tok-c").ListSessions().ok(); }));
  EXPECT_EQ(store.Kill(SIGTERM), 0);
}

}  // namespace
}  // namespace kvfold::testing
