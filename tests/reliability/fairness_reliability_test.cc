// A long full-mode prompt, or a long full-mode history resumed on a cold replica, shares
// the replica with other sessions' short turns instead of stalling them (docs/service.md,
// "The scheduler"). The real kvfold-memory and kvfold-inference binaries, tiny model.
// The checks are orders of events and a generous latency bound in one run, so they hold
// on a loaded machine; bench_service measures the ratios.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/service_cluster.h"

namespace kvfold::testing {
namespace {

std::vector<int32_t> LongPrompt(int n, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(3 + (i * 37 + salt * 11) % 250);
  return ids;
}

// A replica that never saw a full-mode session of 3,000 tokens resumes it from the store:
// it re-prefills the whole history. That runs in chunks between the decode steps of a
// session already decoding there, which finishes its 300 tokens before the resumed turn's
// first token (a restore in one piece kept it waiting for the whole history).
TEST(FairnessReliability, ResumingALongFullModeHistoryDoesNotStallOtherSessions) {
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(cluster.Setup(2, &error, {"--default-mode=full"})) << error;
  ASSERT_TRUE(cluster.Create(0, "history", v1::KV_MODE_FULL).ok());
  TurnResult fed = cluster.Generate(0, "history", LongPrompt(3000, 1), 1);
  ASSERT_TRUE(fed.status.ok()) << fed.status.error_message();
  ASSERT_TRUE(cluster.Create(1, "running", v1::KV_MODE_FULL).ok());
  std::atomic<bool> started{false}, running_done{false}, resumed_first_token{false};
  TurnResult running;
  std::thread decode([&] {
    running = cluster.Generate(1, "running", PromptFor(8, 0), 300, &started);
    running_done.store(true);
  });
  while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool running_finished_first = false;
  std::thread watcher([&] {
    while (!resumed_first_token.load() && !running_done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    running_finished_first = running_done.load() && !resumed_first_token.load();
  });
  TurnResult resumed = cluster.Generate(1, "history", PromptFor(9, 0), 1, &resumed_first_token);
  decode.join();
  watcher.join();
  ASSERT_TRUE(running.status.ok()) << running.status.error_message();
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.error_message();
  EXPECT_EQ(running.tokens.size(), 300u);
  EXPECT_TRUE(resumed.final_message.usage().restored_from_store());
  EXPECT_TRUE(running_finished_first)
      << "the resumed history was prefilled in one piece while the other session waited";
}

// Client-side latency of short turns (4-token prompt, 4 new tokens) on two sessions,
// without and then with a 2,500-token full-mode prompt prefilling on the same replica.
// The short sessions are replaced every 8 turns so their own context stays the same.
// The bound is generous (median within 8x + 30 ms, p90 within 15x + 60 ms, for a loaded
// machine): prompt chunks not bounded by the decode steps' time (--prefill-stall=0, fixed
// 256-token chunks) miss it by far.
TEST(FairnessReliability, ShortTurnsStayFastWhileALongFullModePromptPrefills) {
  Cluster cluster;
  std::string error;
  ASSERT_TRUE(cluster.Setup(1, &error, {"--default-mode=full"})) << error;
  constexpr int kSessions = 2, kTurnsAlone = 20, kTurnsPerSession = 8;
  std::vector<int> next_turn(kSessions, 0);
  std::atomic<bool> failed{false};
  auto run = [&](int turns, const std::atomic<bool>* stop) {
    std::vector<std::vector<double>> per(kSessions);
    std::vector<std::thread> threads;
    for (int i = 0; i < kSessions; ++i) {
      threads.emplace_back([&, i] {
        for (int n = 0; stop != nullptr ? !stop->load() : n < turns; ++n) {
          const int t = next_turn[i]++;
          const std::string id =
              "short-" + std::to_string(i) + "-" + std::to_string(t / kTurnsPerSession);
          if (t % kTurnsPerSession == 0 && !cluster.Create(0, id, v1::KV_MODE_FULL).ok()) {
            failed.store(true);
            return;
          }
          const auto start = std::chrono::steady_clock::now();
          TurnResult turn = cluster.Generate(0, id, PromptFor(i, t, 4), 4);
          const double ms = std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - start)
                                .count();
          if (!turn.status.ok()) failed.store(true);
          if (stop == nullptr || !stop->load()) per[i].push_back(ms);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<double> all;
    for (const auto& v : per) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    return all;
  };
  auto quantile = [](const std::vector<double>& v, double q) {
    return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
  };
  (void)run(2, nullptr);  // warm-up
  const std::vector<double> alone = run(kTurnsAlone, nullptr);
  ASSERT_TRUE(cluster.Create(0, "long", v1::KV_MODE_FULL).ok());
  std::atomic<bool> long_done{false};
  TurnResult long_turn;
  std::thread long_thread([&] {
    long_turn = cluster.Generate(0, "long", LongPrompt(2500, 2), 1, nullptr, 600);
    long_done.store(true);
  });
  const std::vector<double> with_long = run(0, &long_done);
  long_thread.join();
  ASSERT_FALSE(failed.load());
  ASSERT_TRUE(long_turn.status.ok()) << long_turn.status.error_message();
  std::printf("short turns: median %.1f ms, p90 %.1f ms alone (%zu); median %.1f ms, p90 %.1f ms "
              "while a 2,500-token prompt prefills (%zu)\n",
              quantile(alone, 0.5), quantile(alone, 0.9), alone.size(), quantile(with_long, 0.5),
              quantile(with_long, 0.9), with_long.size());
  EXPECT_LE(quantile(with_long, 0.5), 8 * quantile(alone, 0.5) + 30);
  EXPECT_LE(quantile(with_long, 0.9), 15 * quantile(alone, 0.9) + 60);
  EXPECT_GE(with_long.size(), 10u) << "few short turns ran while the long prompt prefilled";
}

}  // namespace
}  // namespace kvfold::testing
