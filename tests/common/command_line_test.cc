// ParseCommandLine's process settings (docs/cli.md, "Process settings").
#include "common/command_line.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include "absl/synchronization/mutex.h"

namespace kvfold {
namespace {

void LockBothOrders() {
  absl::Mutex a, b;
  a.Lock();
  b.Lock();
  b.Unlock();
  a.Unlock();
  b.Lock();  // the reverse order: a cycle in absl's lock-order graph
  a.Lock();
  a.Unlock();
  b.Unlock();
}

// Debian's absl checks lock order unless told otherwise, and aborts on a cycle: the
// death test is what every binary would do without ParseCommandLine's setting.
TEST(CommandLineDeathTest, MutexLockOrderChecksAreOffAfterParsing) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
  EXPECT_DEATH(LockBothOrders(), "deadlock");
  CLI::App app{"test", "command_line_test"};
  ApplyConvention(app);
  char name[] = "command_line_test";
  char* argv[] = {name};
  EXPECT_EQ(ParseCommandLine(app, 1, argv), std::nullopt);
  LockBothOrders();  // no abort
}

// The descriptor limit: the soft limit is raised to the hard one.
TEST(CommandLineTest, TheDescriptorSoftLimitGoesUpToTheHardLimit) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_max <= 64) GTEST_SKIP() << "hard descriptor limit " << files.rlim_max;
  const rlim_t hard = files.rlim_max;
  files.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  CLI::App app{"test", "command_line_test"};
  ApplyConvention(app);
  char name[] = "command_line_test";
  char* argv[] = {name};
  EXPECT_EQ(ParseCommandLine(app, 1, argv), std::nullopt);
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  EXPECT_EQ(files.rlim_cur, hard);
  EXPECT_EQ(files.rlim_max, hard);
}

}  // namespace
}  // namespace kvfold
