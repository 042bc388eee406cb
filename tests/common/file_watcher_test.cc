#include "common/file_watcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/common/temp_files.h"

namespace kvfold {
namespace {

class FileWatcherTest : public testing::TempFilesTest {
 protected:
  // Waits up to 10 s for `calls` to reach `n`.
  static bool WaitForCalls(const std::atomic<int>& calls, int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (calls.load() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return calls.load() >= n;
  }
};

// Long enough that an in-place writer's truncate and write (microseconds apart, more on a
// loaded host) are not both read twice, short against WaitForCalls' 10 s.
constexpr absl::Duration kPeriod = absl::Milliseconds(50);
// Four periods: a change would have been acted on by then.
constexpr auto kQuiet = std::chrono::milliseconds(200);

TEST_F(FileWatcherTest, SameSizeRewritesInPlaceAreSeen) {
  const std::string path = Write("tokens", "tok-a alice\n");
  std::atomic<int> calls{0};
  FileWatcher watcher(path, kPeriod, [&] { ++calls; });
  std::this_thread::sleep_for(kQuiet);
  EXPECT_EQ(calls.load(), 0) << "no change, no call";
  // Same size, same inode, likely the same timestamp as the first write. (The watcher may
  // catch the file truncated and empty: such bytes are never acted on unless they stay.)
  Write("tokens", "tok-b bob!!\n");
  ASSERT_TRUE(WaitForCalls(calls, 1));
  Write("tokens", "tok-c carol\n");
  ASSERT_TRUE(WaitForCalls(calls, 2));
  std::this_thread::sleep_for(kQuiet);
  EXPECT_EQ(calls.load(), 2);
}

// Bytes seen only once (a writer caught part way) are not acted on.
TEST_F(FileWatcherTest, HalfWrittenBytesAreNotActedOn) {
  const std::string path = Write("tokens", "tok-a alice\n");
  std::atomic<int> calls{0};
  FileWatcher watcher(path, absl::Seconds(1), [&] { ++calls; });
  // Three periods of states that last a fortieth of a period each: the watcher reads two
  // or three of them, never the same one twice unless this thread stalls for most of a
  // period (at a 0.4 s period with 0.1 s states, a stall of 0.3 s sufficed). A watcher
  // that acted on bytes seen once would call here.
  for (int i = 0; i < 120; ++i) {
    Write("tokens", "tok-" + std::to_string(i) + " x\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(calls.load(), 0);
  ASSERT_TRUE(WaitForCalls(calls, 1));  // the last bytes stay: acted on within 2 periods
}

// A Kubernetes Secret volume: path -> ..data/tokens, ..data -> ..v1; an update writes
// ..v2 and renames a new ..data symlink over the old one.
TEST_F(FileWatcherTest, KubernetesSymlinkSwapIsSeen) {
  std::filesystem::create_directories(dir_ + "/..v1");
  std::filesystem::create_directories(dir_ + "/..v2");
  Write("..v1/tokens", "tok-a alice\n");
  Write("..v2/tokens", "tok-a alice\ntok-b bob\n");
  std::filesystem::create_directory_symlink("..v1", dir_ + "/..data");
  std::filesystem::create_symlink("..data/tokens", dir_ + "/tokens");
  std::atomic<int> calls{0};
  FileWatcher watcher(dir_ + "/tokens", kPeriod, [&] { ++calls; });
  std::filesystem::create_directory_symlink("..v2", dir_ + "/..data_tmp");
  ASSERT_EQ(std::rename((dir_ + "/..data_tmp").c_str(), (dir_ + "/..data").c_str()), 0);
  ASSERT_TRUE(WaitForCalls(calls, 1));
}

TEST_F(FileWatcherTest, ALostFileAndItsReturnAreChanges) {
  const std::string path = Write("tenants", "* sessions=3\n");
  std::atomic<int> calls{0};
  FileWatcher watcher(path, kPeriod, [&] { ++calls; });
  ASSERT_EQ(std::remove(path.c_str()), 0);
  ASSERT_TRUE(WaitForCalls(calls, 1));
  Write("tenants.next", "* sessions=4\n");
  ASSERT_EQ(std::rename((dir_ + "/tenants.next").c_str(), path.c_str()), 0);
  ASSERT_TRUE(WaitForCalls(calls, 2));
}

TEST_F(FileWatcherTest, NoCallAfterDestruction) {
  const std::string path = Write("tokens", "a b\n");
  std::atomic<int> calls{0};
  { FileWatcher watcher(path, kPeriod, [&] { ++calls; }); }
  Write("tokens", "c d\n");
  std::this_thread::sleep_for(kQuiet);
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace kvfold
