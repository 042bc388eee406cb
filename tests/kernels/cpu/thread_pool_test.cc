// ThreadPool::ParallelFor: every index of [0, n) is run exactly once, by a valid thread,
// in ranges that start on a grain boundary and are whole grains except the last; a
// thread that arrives late still finds the job complete and the pool reusable; many jobs
// in a row (the decode loop's pattern) neither lose nor repeat work.
// ParallelForHomes: every unit exactly once, one unit per call; a thread runs its home
// share in ascending order and then takes a stalled thread's units from the back.
// Backend::ParallelForHost on the CPU backends: every row exactly once, on both of a
// 2-thread pool's threads, on the caller's thread for the reference backend.
#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace kvfold::kernels::cpu {
namespace {

struct Coverage {
  std::vector<std::atomic<int>> hits;
  std::atomic<int> bad_range{0};
  std::atomic<int> bad_thread{0};
  explicit Coverage(int64_t n) : hits(n) {}
};

void RunAndCheck(ThreadPool& pool, int64_t n, int64_t grain) {
  SCOPED_TRACE(testing::Message() << "threads " << pool.num_threads() << " n " << n << " grain "
                                  << grain);
  Coverage c(n);
  auto fn = [&](int64_t b, int64_t e, int t) {
    if (t < 0 || t >= pool.num_threads()) c.bad_thread.fetch_add(1);
    if (b < 0 || e > n || b >= e || b % grain != 0 || (e != n && (e - b) % grain != 0)) {
      c.bad_range.fetch_add(1);
    }
    for (int64_t i = std::max<int64_t>(0, b); i < std::min(e, n); ++i) c.hits[i].fetch_add(1);
  };
  pool.ParallelFor(n, grain, fn);
  EXPECT_EQ(c.bad_range.load(), 0);
  EXPECT_EQ(c.bad_thread.load(), 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c.hits[i].load(), 1) << "index " << i;
}

TEST(ThreadPoolTest, EveryIndexExactlyOnceInWholeGrains) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 12, 64, 500, 1001}) {
      for (int64_t grain : {1, 3, 16}) RunAndCheck(pool, n, grain);
    }
  }
}

TEST(ThreadPoolTest, EmptyRangeCallsNothing) {
  ThreadPool pool(2);
  int calls = 0;
  auto fn = [&](int64_t, int64_t, int) { ++calls; };
  pool.ParallelFor(0, 1, fn);
  EXPECT_EQ(calls, 0);
}

// One thread stalls in its first range: the others take the rest of the work, and the
// call still returns only when the stalled range is done.
TEST(ThreadPoolTest, SlowThreadLeavesTheRestToOthers) {
  ThreadPool pool(2);
  const int64_t n = 200;
  std::vector<std::atomic<int>> by_thread(2);
  std::atomic<bool> stalled{false};
  std::atomic<int> done{0};
  auto fn = [&](int64_t b, int64_t e, int t) {
    if (!stalled.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    by_thread[t].fetch_add(static_cast<int>(e - b));
    done.fetch_add(static_cast<int>(e - b));
  };
  pool.ParallelFor(n, 1, fn);
  EXPECT_EQ(done.load(), n);
  EXPECT_EQ(by_thread[0].load() + by_thread[1].load(), n);
  // The first claim (the one that stalls) is a quarter of the work: half of it split
  // between 2 threads. The other thread claims everything else while it sleeps (or, if
  // that thread never got a core, the stalled one does it all afterwards), so one thread
  // ran at least three quarters; a fixed half per thread would fail this.
  EXPECT_GE(std::max(by_thread[0].load(), by_thread[1].load()), n - n / 4);
}

TEST(ThreadPoolTest, ManyJobsInARow) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto fn = [&](int64_t b, int64_t e, int) { total.fetch_add(e - b); };
  int64_t expected = 0;
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 1 + job % 37;
    pool.ParallelFor(n, 1 + job % 3, fn);
    expected += n;
  }
  EXPECT_EQ(total.load(), expected);
}

TEST(ThreadPoolTest, HomesRunEveryUnitOnceOneAtATime) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t units : {1, 2, 3, 7, 64, 1001}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << " units " << units);
      Coverage c(units);
      auto fn = [&](int64_t b, int64_t e, int t) {
        if (t < 0 || t >= threads) c.bad_thread.fetch_add(1);
        if (b < 0 || e != b + 1 || e > units) {
          c.bad_range.fetch_add(1);
          return;
        }
        c.hits[b].fetch_add(1);
      };
      pool.ParallelForHomes(units, fn);
      EXPECT_EQ(c.bad_range.load(), 0);
      EXPECT_EQ(c.bad_thread.load(), 0);
      for (int64_t i = 0; i < units; ++i) ASSERT_EQ(c.hits[i].load(), 1) << "unit " << i;
    }
  }
}

// The first unit run stalls its thread until every other unit is done (or 10 s pass): the
// other thread runs its own home in ascending order, then the stalled home's units from
// its back, descending, so the stalled thread runs only the unit it started (or, if the
// other thread never got a core, all of them).
TEST(ThreadPoolTest, HomesHandAStalledThreadsTailToTheOther) {
  ThreadPool pool(2);
  const int64_t units = 200;
  std::mutex mu;
  std::vector<std::vector<int64_t>> order(2);
  std::atomic<bool> stalled{false};
  std::atomic<int> stalled_thread{-1};
  std::atomic<int64_t> done{0};
  auto fn = [&](int64_t b, int64_t, int t) {
    if (!stalled.exchange(true)) {
      stalled_thread.store(t);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (done.load() < units - 1 && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      order[t].push_back(b);
    }
    done.fetch_add(1);
  };
  pool.ParallelForHomes(units, fn);
  const int slow = stalled_thread.load();
  ASSERT_GE(slow, 0);
  const std::vector<int64_t>& other = order[1 - slow];
  std::vector<int64_t> all = order[0];
  all.insert(all.end(), order[1].begin(), order[1].end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(units));
  for (int64_t i = 0; i < units; ++i) ASSERT_EQ(all[i], i);
  if (other.empty()) return;  // the other thread never ran: the stalled one did it all
  EXPECT_EQ(order[slow].size(), 1u);
  // The other thread: ascending over its home, then descending from the stalled home's
  // back down to just past the unit the stalled thread started with.
  size_t turn = 1;
  while (turn < other.size() && other[turn] == other[turn - 1] + 1) ++turn;
  EXPECT_EQ(turn, static_cast<size_t>(units / 2));
  for (size_t i = turn + 1; i < other.size(); ++i) EXPECT_EQ(other[i], other[i - 1] - 1) << i;
}

TEST(ThreadPoolTest, BackendHostRowsRunOnceEachAcrossThePool) {
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "cpu-ref" : "cpu");
    std::unique_ptr<Backend> backend = CreateCpuBackend({2, reference});
    for (int64_t n : {0, 1, 2, 16, 33}) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex mu;
      std::vector<std::thread::id> threads;
      std::atomic<int> calls{0};
      backend->ParallelForHost(n, [&](int64_t begin, int64_t end) {
        calls.fetch_add(1);
        {
          std::lock_guard<std::mutex> lock(mu);
          threads.push_back(std::this_thread::get_id());
        }
        // On the pool, the first range waits (2 s at most) for a second one to start, so
        // a second thread shows up in `threads` unless none ever claims a range.
        if (!reference) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
          while (calls.load() < 2 && end < n && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::yield();
          }
        }
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n " << n << " row " << i;
      if (n == 0) {
        EXPECT_EQ(calls.load(), 0);
      }
      std::sort(threads.begin(), threads.end());
      threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
      if (reference || n < 2) {
        EXPECT_EQ(threads, std::vector<std::thread::id>(n > 0, std::this_thread::get_id()));
      } else {
        EXPECT_EQ(threads.size(), 2u) << "n " << n << ": one thread ran every row";
      }
    }
  }
}

}  // namespace
}  // namespace kvfold::kernels::cpu
