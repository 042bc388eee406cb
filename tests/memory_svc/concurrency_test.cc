// Eight writers race compare-and-set on one session through the real server: every version
// number is committed exactly once, losers get ABORTED, and the history has no gaps.
#include <barrier>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/memory_svc/server_fixture.h"

namespace kvfold::memory::testing {
namespace {

constexpr int kWriters = 8;

class ConcurrencyTest : public ServerFixture {
 protected:
  void SetUp() override {
    config_.store.versions_kept = 1000;  // keep the whole history for the checks
    StartServer();
  }
};

uint64_t SeedOf(int writer, int attempt) { return 1000 + writer * 100000 + attempt; }

TEST_F(ConcurrencyTest, EightWritersRaceOnOneHead) {
  StoreClient setup = Client();
  const TestBlock first = MakeBlock(1);
  ASSERT_TRUE(setup.Put("race", 0, first.header, first.payload).ok());

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

  // Phase 1: lock-step rounds. All eight read the same head, then all try to advance it:
  // exactly one wins each round.
  constexpr int kRounds = 12;
  std::barrier sync(kWriters);
  std::vector<int> wins(kWriters, 0);
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < kWriters; ++w) {
      threads.emplace_back([&, w] {
        StoreClient client = Client();  // one channel per writer, like separate replicas
        for (int round = 0; round < kRounds; ++round) {
          absl::StatusOr<v1::SessionInfo> info = client.GetSessionInfo("race");
          sync.arrive_and_wait();  // everyone has read the same head
          const uint64_t seed = SeedOf(w, round);
          const TestBlock b = MakeBlock(seed);
          absl::StatusOr<v1::PutBlockResponse> r =
              client.Put("race", info.ok() ? info->head_version() : 0, b.header, b.payload);
          if (r.ok()) ++wins[w];
          record(r, seed);
          sync.arrive_and_wait();  // the round is over before anyone reads again
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  EXPECT_EQ(committed.size(), static_cast<size_t>(kRounds));
  EXPECT_EQ(aborted, kRounds * (kWriters - 1));

  // Phase 2: free-for-all with retries; each writer commits 5 versions.
  constexpr int kPerWriter = 5;
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < kWriters; ++w) {
      threads.emplace_back([&, w] {
        StoreClient client = Client();
        int done = 0;
        for (int attempt = 1000; done < kPerWriter && attempt < 1000 + 500; ++attempt) {
          absl::StatusOr<v1::SessionInfo> info = client.GetSessionInfo("race");
          if (!info.ok()) continue;
          const uint64_t seed = SeedOf(w, attempt);
          const TestBlock b = MakeBlock(seed);
          absl::StatusOr<v1::PutBlockResponse> r =
              client.Put("race", info->head_version(), b.header, b.payload);
          record(r, seed);
          done += r.ok();
        }
        EXPECT_EQ(done, kPerWriter) << "writer " << w;
      });
    }
    for (std::thread& t : threads) t.join();
  }

  EXPECT_EQ(duplicates, 0);
  EXPECT_EQ(other_errors, 0);
  const uint64_t expected_latest = 1 + kRounds + kWriters * kPerWriter;
  ASSERT_EQ(committed.size(), expected_latest - 1);
  // No gaps: versions 2..latest each committed exactly once, by the writer that got OK.
  uint64_t v = 2;
  for (const auto& [version, seed] : committed) EXPECT_EQ(version, v++);
  absl::StatusOr<v1::ListVersionsResponse> list = setup.ListVersions("race");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->session().latest_version(), expected_latest);
  EXPECT_EQ(list->session().head_version(), expected_latest);
  ASSERT_EQ(list->versions_size(), static_cast<int>(expected_latest));
  for (int i = 0; i < list->versions_size(); ++i) {
    EXPECT_EQ(list->versions(i).version(), expected_latest - i);
  }
  for (const auto& [version, seed] : committed) {
    absl::StatusOr<StoreBlock> got = setup.Get("race", version);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->payload, MakeBlock(seed).payload) << "version " << version;
  }
}

}  // namespace
}  // namespace kvfold::memory::testing
