#include "common/daemon_signals.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <thread>

namespace kvfold {
namespace {

bool Blocked(int signal_number) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal_number) == 1;
}

// DaemonSignals leaves the signals blocked for good (a daemon's whole life): each test
// puts this thread's mask back as it found it.
class DaemonSignalsTest : public ::testing::Test {
 protected:
  void SetUp() override { pthread_sigmask(SIG_BLOCK, nullptr, &saved_); }
  void TearDown() override { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  sigset_t saved_;
};

// The signals are sent to this thread (pthread_kill), where they wait as pending until
// WaitForStop takes them; pending standard signals are taken lowest number first.
TEST_F(DaemonSignalsTest, ReloadsOnEachHangupThenReturnsTheStopSignal) {
  const DaemonSignals signals;
  ASSERT_EQ(pthread_kill(pthread_self(), SIGTERM), 0);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGHUP), 0);
  int reloads = 0;
  EXPECT_EQ(signals.WaitForStop([&] { ++reloads; }), SIGTERM);
  EXPECT_EQ(reloads, 1);

  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);
  EXPECT_EQ(signals.WaitForStop([&] { ++reloads; }), SIGINT);
  EXPECT_EQ(reloads, 1);
}

TEST_F(DaemonSignalsTest, ThreadsStartedAfterwardsInheritTheMask) {
  ASSERT_FALSE(Blocked(SIGTERM));
  const DaemonSignals signals;
  EXPECT_TRUE(Blocked(SIGTERM));
  EXPECT_TRUE(Blocked(SIGINT));
  EXPECT_TRUE(Blocked(SIGHUP));
  bool blocked_in_thread = false;
  std::thread([&] {
    blocked_in_thread = Blocked(SIGTERM) && Blocked(SIGINT) && Blocked(SIGHUP);
  }).join();
  EXPECT_TRUE(blocked_in_thread);
}

}  // namespace
}  // namespace kvfold
