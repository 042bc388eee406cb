// kvfold-memory-admin copy, the real binary: a RocksDB store with gaps from retention,
// pins, a rolled-back head and two tenants is copied to RocksDB and to RADOS and must
// come out identical (version numbers, head, pins, times, bytes); a second run finds
// everything already there; bad arguments exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>

#include "memory_svc/store/memory_store.h"
#include "tests/memory_svc/backend_param.h"
#include "tests/memory_svc/server_process.h"
#include "tests/memory_svc/test_blocks.h"

#ifndef KVFOLD_MEMORY_ADMIN_BINARY
#error "KVFOLD_MEMORY_ADMIN_BINARY must name the kvfold-memory-admin binary"
#endif

namespace kvfold::memory_svc::testing {
namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class AdminCopyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "rados" && CephConf().empty()) GTEST_SKIP() << kCephSkipMessage;
  }

  // Fills a RocksDB store in source_ and closes it.
  void FillSource() {
    StoreOptions options = BackendOptions("rocksdb", source_.path(), "");
    options.versions_kept = 3;
    absl::StatusOr<std::unique_ptr<MemoryStore>> store = MemoryStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    MemoryStore& s = **store;
    for (uint64_t v = 1; v <= 6; ++v) {
      const TestBlock b = v == 2 ? MakeBlock(v, 96, 4096) : MakeBlock(v, 5 + v, 33);
      ASSERT_TRUE(s.Put("t1", "a", v - 1, b.header, b.payload, /*pin=*/v == 2).ok());
    }
    ASSERT_TRUE(s.SetHead("t1", "a", 5, 0).ok());  // roll back: head 5, latest 6
    const TestBlock other = MakeBlock(77, 96, 4096);
    ASSERT_TRUE(s.Put("t2", "a", 0, other.header, other.payload, false).ok());
    ASSERT_TRUE(s.Put("t2", "b.c-d", 0, other.header, other.payload, false).ok());
    ASSERT_TRUE(s.Close().ok());
  }

  std::string DestinationSpec() const {
    return GetParam() == "rados"
               ? "rados:" + CephConf() + ":" + CephPool() + ":" + name_space_
               : "rocksdb:" + destination_.path();
  }

  TempDir source_, destination_;
  const std::string name_space_ = FreshNamespace();
};

TEST_P(AdminCopyTest, CopiesEverySessionExactly) {
  FillSource();
  const std::vector<std::string> args = {"copy", "--from=rocksdb:" + source_.path(),
                                         "--to=" + DestinationSpec(),
                                         "--ceph-keyring=" + CephKeyring()};
  const std::string log = source_.path() + "/admin.log";
  ASSERT_EQ(RunToExit(KVFOLD_MEMORY_ADMIN_BINARY, args, log), 0) << ReadFileOrEmpty(log);
  ASSERT_EQ(RunToExit(KVFOLD_MEMORY_ADMIN_BINARY, args, log), 0)
      << "a second run must be a no-op: " << ReadFileOrEmpty(log);

  absl::StatusOr<std::unique_ptr<MemoryStore>> from =
      MemoryStore::Open(BackendOptions("rocksdb", source_.path(), ""));
  absl::StatusOr<std::unique_ptr<MemoryStore>> to =
      MemoryStore::Open(BackendOptions(GetParam(), destination_.path(), name_space_));
  ASSERT_TRUE(from.ok() && to.ok());
  int sessions = 0;
  for (const std::string tenant : {"t1", "t2"}) {
    absl::StatusOr<SessionPage> page = (*to)->ListSessions(tenant, 100, "");
    ASSERT_TRUE(page.ok()) << page.status();
    absl::StatusOr<SessionPage> want = (*from)->ListSessions(tenant, 100, "");
    ASSERT_EQ(page->sessions.size(), want->sessions.size()) << tenant;
    for (const v1::SessionInfo& info : want->sessions) {
      ++sessions;
      absl::StatusOr<SessionExport> a = (*from)->ExportSession(tenant, info.session_id());
      absl::StatusOr<SessionExport> b = (*to)->ExportSession(tenant, info.session_id());
      ASSERT_TRUE(a.ok() && b.ok()) << info.session_id();
      EXPECT_EQ(a->info.SerializeAsString(), b->info.SerializeAsString());
      ASSERT_EQ(a->versions.size(), b->versions.size());
      for (size_t i = 0; i < a->versions.size(); ++i) {
        EXPECT_EQ(a->versions[i].info.SerializeAsString(), b->versions[i].info.SerializeAsString());
        EXPECT_EQ(a->versions[i].header.SerializeAsString(),
                  b->versions[i].header.SerializeAsString());
        EXPECT_EQ(a->versions[i].payload, b->versions[i].payload);
      }
    }
  }
  EXPECT_EQ(sessions, 3);
  // The copied session goes on where it was: head 5, next version 7.
  absl::StatusOr<v1::ListVersionsResponse> list = (*to)->ListVersions("t1", "a");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->session().head_version(), 5u);
  EXPECT_EQ(list->versions_size(), 4);  // 2 (pinned), 4, 5, 6
  const TestBlock next = MakeBlock(8);
  absl::StatusOr<v1::PutBlockResponse> put =
      (*to)->Put("t1", "a", 5, next.header, next.payload, false);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->version(), 7u);
}

TEST(AdminCopyArgsTest, BadArgumentsExit2) {
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_ADMIN_BINARY, {}), 2);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_ADMIN_BINARY, {"copy", "--from=rocksdb:/x"}), 2);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_ADMIN_BINARY, {"copy", "--from=leveldb:/x", "--to=rocksdb:/y"}),
            2);
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_ADMIN_BINARY, {"copy", "--from=rocksdb:/x", "--to=rados:c"}), 2);
  // A source that is not a database is not created empty.
  EXPECT_EQ(RunToExit(KVFOLD_MEMORY_ADMIN_BINARY,
                      {"copy", "--from=rocksdb:/nonexistent-kvfold-db", "--to=rocksdb:/y"}),
            1);
  EXPECT_FALSE(std::filesystem::exists("/nonexistent-kvfold-db"));
}

INSTANTIATE_TEST_SUITE_P(Backends, AdminCopyTest, ::testing::Values("rocksdb", "rados"),
                         BackendName);

}  // namespace
}  // namespace kvfold::memory_svc::testing
