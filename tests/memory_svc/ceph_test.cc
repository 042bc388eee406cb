// kvfold-memory on a real Ceph cluster (scripts/ceph_dev.sh: 1 monitor, 3 OSDs, pool size 3
// / min_size 2; the CTest fixture starts it and sets KVFOLD_CEPH_CONF): several stateless
// processes share one pool, compare-and-set holds across them, and neither a lost OSD nor
// a killed replica loses an acknowledged write.
#include <gtest/gtest.h>
#include <rados/librados.hpp>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "memory_svc/store/memory_store.h"
#include "memory_svc/store/rados_layout.h"
#include "tests/memory_svc/backend_param.h"
#include "tests/memory_svc/cas_race.h"
#include "tests/memory_svc/put_stream.h"
#include "tests/memory_svc/server_process.h"

#ifndef KVFOLD_MEMORY_BINARY
#error "KVFOLD_MEMORY_BINARY must name the kvfold-memory binary"
#endif

namespace kvfold::memory_svc::testing {
namespace {

class CephTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CephConf().empty()) GTEST_SKIP() << kCephSkipMessage;
  }

  // A kvfold-memory replica on the test pool, in this test's namespace.
  std::unique_ptr<ServerProcess> StartReplica() {
    auto server = std::make_unique<ServerProcess>();
    const bool started = server->Start(
        KVFOLD_MEMORY_BINARY,
        {"--listen=127.0.0.1:0", "--backend=rados", "--ceph-conf=" + CephConf(),
         "--pool=" + CephPool(), "--rados-namespace=" + name_space_, "--versions-kept=100000",
         "--drain-seconds=2", "--ceph-keyring=" + CephKeyring(), "--insecure-no-auth"});
    EXPECT_TRUE(started);
    return started ? std::move(server) : nullptr;
  }

  // scripts/ceph_dev.sh with the fixture's cluster directory.
  static int DevScript(const std::string& args) {
    const char* script = std::getenv("KVFOLD_CEPH_DEV_SCRIPT");
    if (script == nullptr) return -1;
    return std::system(absl::StrCat(script, " ", args, " >&2").c_str());
  }

  const std::string name_space_ = FreshNamespace();
};

// The cluster runs cephx: the key comes from the --ceph-keyring file, and without it (or
// with a wrong one) the process does not start.
TEST_F(CephTest, TheKeyringComesFromAFile) {
  if (CephKeyring().empty()) GTEST_SKIP() << "the test cluster runs without cephx";
  const std::vector<std::string> base = {"--listen=127.0.0.1:0", "--backend=rados",
                                         "--ceph-conf=" + CephConf(), "--pool=" + CephPool(),
                                         "--insecure-no-auth"};
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, base), 1);
  TempDir dir;
  const std::string wrong = dir.path() + "/wrong.keyring";
  std::FILE* f = std::fopen(wrong.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("[client.admin]\n\tkey = AQBtFXBnAAAAABAAd9Wn1fVfUp4nU1Xq4hWwXA==\n", f);
  std::fclose(f);
  std::vector<std::string> args = base;
  args.push_back("--ceph-keyring=" + wrong);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_BINARY, args), 1);
  std::unique_ptr<ServerProcess> server = StartReplica();  // with the right keyring
  ASSERT_TRUE(server);
  EXPECT_EQ(server->Stop(SIGTERM), 0);
}

TEST_F(CephTest, EightWritersOnTwoProcessesRaceOnOneHead) {
  std::unique_ptr<ServerProcess> a = StartReplica(), b = StartReplica();
  ASSERT_TRUE(a && b);
  StoreClient checker = ClientFor(b->address());
  // Writers 0-3 talk to process A, 4-7 to process B: the compare-and-set of a put runs
  // on the session's head object in the cluster, not in either process.
  RunCasRace([&](int w) { return ClientFor(w < kRaceWriters / 2 ? a->address() : b->address()); },
             checker, "race", /*rounds=*/8, /*per_writer=*/3);
  EXPECT_EQ(a->Stop(SIGTERM), 0);
  EXPECT_EQ(b->Stop(SIGTERM), 0);
}

// Streams puts from `clients` writers (each its own session) until `stop`; writer c talks
// to replicas[c % n] and moves to the next replica when a call fails. An ambiguous failure
// (the put may have committed) is resolved by reading the head: a present version is
// exactly its block (VerifyStreams checks that), so the writer continues after it.
struct Streams {
  std::vector<std::set<uint64_t>> acked;
  std::atomic<int> total{0};
  std::mutex mu;
};

constexpr uint64_t kMaxVersionsPerClient = 150;

void StreamPuts(const std::vector<std::string>& replicas, int clients, std::atomic<bool>& stop,
                Streams& out) {
  out.acked.assign(clients, {});
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      size_t at = c % replicas.size();
      uint64_t head = 0;
      StorePutOptions options;
      options.chunk_bytes = 64 << 10;
      options.call.timeout = absl::Seconds(60);
      // Paced and capped: the memstore OSDs hold every byte in RAM (512 MiB each).
      while (!stop && head < kMaxVersionsPerClient) {
        absl::SleepFor(absl::Milliseconds(20));
        StoreClient client = ClientFor(replicas[at]);
        const TestBlock b = BlockFor(c, head + 1);
        absl::StatusOr<v1::PutBlockResponse> r =
            client.Put(SessionOf(c), head, b.header, b.payload, options);
        if (r.ok()) {
          EXPECT_EQ(r->version(), head + 1);
          head = r->version();
          std::lock_guard<std::mutex> lock(out.mu);
          out.acked[c].insert(head);
          ++out.total;
          continue;
        }
        EXPECT_NE(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
        at = (at + 1) % replicas.size();
        StoreClient other = ClientFor(replicas[at]);
        StoreCallOptions call;
        call.timeout = absl::Seconds(60);
        absl::StatusOr<v1::SessionInfo> info = other.GetSessionInfo(SessionOf(c), call);
        if (info.ok()) {
          head = info->head_version();
        } else {
          EXPECT_EQ(info.status().code(), absl::StatusCode::kNotFound) << info.status();
          if (head != 0) ADD_FAILURE() << "session " << c << " vanished: " << info.status();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// The memstore OSDs hold everything in memory: give it back.
void DeleteStreams(const std::string& address, size_t clients) {
  StoreClient client = ClientFor(address);
  for (size_t c = 0; c < clients; ++c) {
    EXPECT_TRUE(client.Delete(SessionOf(static_cast<int>(c))).ok());
  }
}

TEST_F(CephTest, PutsContinueWhileAnOsdIsKilledAndItRejoins) {
  std::unique_ptr<ServerProcess> server = StartReplica();
  ASSERT_TRUE(server);
  std::atomic<bool> stop{false};
  Streams streams;
  std::thread writers([&] { StreamPuts({server->address()}, 3, stop, streams); });
  absl::SleepFor(absl::Seconds(1));
  const int before_kill = streams.total;
  ASSERT_EQ(DevScript("kill-osd 1"), 0);
  absl::SleepFor(absl::Seconds(8));  // the monitor marks it down, PGs go on with 2 of 3
  const int while_down = streams.total - before_kill;
  EXPECT_NE(DevScript("status"), 0) << "osd.1 should be down";
  ASSERT_EQ(DevScript("start-osd 1"), 0);
  absl::SleepFor(absl::Seconds(2));
  stop = true;
  writers.join();
  std::printf("acknowledged: %d before the kill, %d while osd.1 was down, %d in all\n",
              before_kill, while_down, streams.total.load());
  EXPECT_GT(before_kill, 0);
  EXPECT_GT(while_down, 0) << "writes must continue with one OSD of three down";
  // The OSD rejoins: all three up and the pool writable.
  bool healthy = false;
  for (int i = 0; i < 60 && !healthy; ++i) {
    healthy = DevScript("status") == 0;
    if (!healthy) absl::SleepFor(absl::Seconds(1));
  }
  EXPECT_TRUE(healthy) << "osd.1 did not rejoin";
  VerifyStreams(server->address(), streams.acked);
  DeleteStreams(server->address(), streams.acked.size());
  EXPECT_EQ(server->Stop(SIGTERM), 0);
}

TEST_F(CephTest, AReplicaKilledMidStreamLosesNothing) {
  std::unique_ptr<ServerProcess> a = StartReplica(), b = StartReplica();
  ASSERT_TRUE(a && b);
  std::atomic<bool> stop{false};
  Streams streams;
  std::thread writers([&] { StreamPuts({a->address(), b->address()}, 4, stop, streams); });
  absl::SleepFor(absl::Milliseconds(1500));
  const int status = a->Stop(SIGKILL);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  const int at_kill = streams.total;
  absl::SleepFor(absl::Seconds(2));  // every writer now goes through B
  stop = true;
  writers.join();
  std::printf("acknowledged: %d before replica A was killed, %d in all\n", at_kill,
              streams.total.load());
  EXPECT_GT(at_kill, 0);
  EXPECT_GT(streams.total, at_kill) << "writers must move to the surviving replica";
  // Nothing acknowledged by A or B is lost, and a fresh replica sees the same sessions.
  VerifyStreams(b->address(), streams.acked);
  std::unique_ptr<ServerProcess> c = StartReplica();
  ASSERT_TRUE(c);
  VerifyStreams(c->address(), streams.acked);
  DeleteStreams(c->address(), streams.acked.size());
  EXPECT_EQ(b->Stop(SIGTERM), 0);
  EXPECT_EQ(c->Stop(SIGTERM), 0);
}

// A version object whose writer died before its commit is garbage: the collector removes it
// once older than the grace period, and never a committed one.
TEST_F(CephTest, UncommittedVersionsAreCollected) {
  absl::StatusOr<std::unique_ptr<MemoryStore>> store =
      MemoryStore::Open(BackendOptions("rados", "", name_space_));
  ASSERT_TRUE(store.ok()) << store.status();
  const TestBlock b1 = BlockFor(0, 1), b2 = BlockFor(0, 2);
  ASSERT_TRUE((*store)->Put("t", "s", 0, b1.header, b1.payload, false).ok());
  // What a writer that died between its two steps leaves: version 2's object, no commit.
  librados::Rados cluster;
  ASSERT_EQ(cluster.init2("client.admin", "ceph", 0), 0);
  ASSERT_EQ(cluster.conf_read_file(CephConf().c_str()), 0);
  if (!CephKeyring().empty()) {
    ASSERT_EQ(cluster.conf_set("keyring", CephKeyring().c_str()), 0);
  }
  ASSERT_EQ(cluster.connect(), 0);
  librados::IoCtx io;
  ASSERT_EQ(cluster.ioctx_create(CephPool().c_str(), io), 0);
  io.set_namespace(name_space_);
  const std::string orphan = rados_layout::PayloadObject("t", "s", 2, 77);
  librados::bufferlist bl;
  bl.append(b2.payload.data(), b2.payload.size());
  ASSERT_EQ(io.write_full(orphan, bl), 0);

  absl::StatusOr<int> kept = (*store)->CollectGarbage(/*grace_seconds=*/3600);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, 0) << "a young object may still be committed by its writer";
  absl::SleepFor(absl::Milliseconds(1100));
  absl::StatusOr<int> removed = (*store)->CollectGarbage(/*grace_seconds=*/1);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 1);
  uint64_t size = 0;
  time_t mtime = 0;
  EXPECT_EQ(io.stat(orphan, &size, &mtime), -ENOENT);
  // The committed version is untouched, and version 2 is still free for the next writer.
  absl::StatusOr<StoredBlock> got = (*store)->Get("t", "s", 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, b1.payload);
  absl::StatusOr<v1::PutBlockResponse> put = (*store)->Put("t", "s", 1, b2.header, b2.payload, false);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->version(), 2u);
  io.close();
  cluster.shutdown();
}

}  // namespace
}  // namespace kvfold::memory_svc::testing
