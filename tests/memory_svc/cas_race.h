// Eight writers race compare-and-set on one session, each through its own StoreClient
// (the caller decides which server each writer talks to: one server, or two processes
// sharing a RADOS pool). Checks: in lock-step rounds exactly one writer wins and the other
// seven get ABORTED; in a free-for-all with retries every version number is committed
// exactly once, no gaps, and each version holds its winner's bytes.
#ifndef KVFOLD_TESTS_MEMORY_SVC_CAS_RACE_H_
#define KVFOLD_TESTS_MEMORY_SVC_CAS_RACE_H_

#include <gtest/gtest.h>

#include <barrier>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memory_svc/client/store_client.h"
#include "tests/memory_svc/test_blocks.h"

namespace kvfold::memory_svc::testing {

inline constexpr int kRaceWriters = 8;

inline uint64_t RaceSeed(int writer, int attempt) { return 1000 + writer * 100000 + attempt; }

// `client_for(w)` makes writer w's client; `checker` reads the result. The store must keep
// at least 1 + rounds + 8 * per_writer versions.
inline void RunCasRace(const std::function<StoreClient(int)>& client_for, StoreClient& checker,
                       const std::string& session, int rounds = 12, int per_writer = 5) {
  const TestBlock first = MakeBlock(1);
  ASSERT_TRUE(checker.Put(session, 0, first.header, first.payload).ok());

  std::mutex mu;
  std::map<uint64_t, uint64_t> committed;  // version -> seed of the block committed
  int aborted = 0, other_errors = 0, duplicates = 0;
  auto record = [&](const absl::StatusOr<v1::PutBlockResponse>& r, uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu);
    if (r.ok()) {
      duplicates += !committed.emplace(r->version(), seed).second;
    } else if (r.status().code() == absl::StatusCode::kAborted) {
      ++aborted;
    } else {
      ++other_errors;
      ADD_FAILURE() << r.status();
    }
  };

  // Phase 1: lock-step rounds. All eight read the same head, then all try to advance it.
  std::barrier sync(kRaceWriters);
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < kRaceWriters; ++w) {
      threads.emplace_back([&, w] {
        StoreClient client = client_for(w);
        for (int round = 0; round < rounds; ++round) {
          absl::StatusOr<v1::SessionInfo> info = client.GetSessionInfo(session);
          sync.arrive_and_wait();  // everyone has read the same head
          const uint64_t seed = RaceSeed(w, round);
          const TestBlock b = MakeBlock(seed);
          record(client.Put(session, info.ok() ? info->head_version() : 0, b.header, b.payload),
                 seed);
          sync.arrive_and_wait();  // the round is over before anyone reads again
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  EXPECT_EQ(committed.size(), static_cast<size_t>(rounds));
  EXPECT_EQ(aborted, rounds * (kRaceWriters - 1));

  // Phase 2: free-for-all with retries; each writer commits `per_writer` versions.
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < kRaceWriters; ++w) {
      threads.emplace_back([&, w] {
        StoreClient client = client_for(w);
        int done = 0;
        for (int attempt = 1000; done < per_writer && attempt < 1000 + 500; ++attempt) {
          absl::StatusOr<v1::SessionInfo> info = client.GetSessionInfo(session);
          if (!info.ok()) continue;
          const uint64_t seed = RaceSeed(w, attempt);
          const TestBlock b = MakeBlock(seed);
          absl::StatusOr<v1::PutBlockResponse> r =
              client.Put(session, info->head_version(), b.header, b.payload);
          record(r, seed);
          done += r.ok();
        }
        EXPECT_EQ(done, per_writer) << "writer " << w;
      });
    }
    for (std::thread& t : threads) t.join();
  }

  EXPECT_EQ(duplicates, 0);
  EXPECT_EQ(other_errors, 0);
  const uint64_t expected_latest = 1 + rounds + kRaceWriters * per_writer;
  ASSERT_EQ(committed.size(), expected_latest - 1);
  // No gaps: versions 2..latest each committed exactly once, by the writer that got OK.
  uint64_t v = 2;
  for (const auto& [version, seed] : committed) EXPECT_EQ(version, v++);
  absl::StatusOr<v1::ListVersionsResponse> list = checker.ListVersions(session);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->session().latest_version(), expected_latest);
  EXPECT_EQ(list->session().head_version(), expected_latest);
  ASSERT_EQ(list->versions_size(), static_cast<int>(expected_latest));
  for (int i = 0; i < list->versions_size(); ++i) {
    EXPECT_EQ(list->versions(i).version(), expected_latest - i);
  }
  for (const auto& [version, seed] : committed) {
    absl::StatusOr<StoreBlock> got = checker.Get(session, version);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->payload, MakeBlock(seed).payload) << "version " << version;
  }
}

}  // namespace kvfold::memory_svc::testing

#endif  // KVFOLD_TESTS_MEMORY_SVC_CAS_RACE_H_
