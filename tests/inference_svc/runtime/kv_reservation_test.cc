#include "inference_svc/runtime/kv_reservation.h"

#include <gtest/gtest.h>

#include "inference_svc/runtime/session_table.h"

namespace kvfold::runtime {
namespace {

KvGeometry Geometry() {
  KvGeometry g;
  g.block_size = 16;
  g.transient_tokens = 64;
  g.mem_slots = 8;
  g.chunk_size = 8;
  return g;
}

TEST(KvReservationTest, EachModeCapsWhatStaysResident) {
  const KvGeometry g = Geometry();
  SessionSpec full{core::KvMode::kFull, 0, 0};
  EXPECT_EQ(ReserveBlocks(full, g, 0, 1000), 0);
  EXPECT_EQ(ReserveBlocks(full, g, 1, 1000), 2);
  EXPECT_EQ(ReserveBlocks(full, g, 33, 1000), 4);        // 3 blocks + a partial one at the front
  EXPECT_EQ(ReserveBlocks(full, g, 1000000, 1000), 62501);
  SessionSpec sliding{core::KvMode::kSliding, 100, 0};
  EXPECT_EQ(ReserveBlocks(sliding, g, 50, 1000), 5);      // below the window: all of it
  EXPECT_EQ(ReserveBlocks(sliding, g, 1000000, 1000), ReserveBlocks(sliding, g, 164, 1000));
  SessionSpec sink{core::KvMode::kSink, 100, 4};
  EXPECT_EQ(ReserveBlocks(sink, g, 1000000, 1000), 2 + ReserveBlocks(sliding, g, 164, 1000));
  SessionSpec memory{core::KvMode::kMemory, 16, 0};
  EXPECT_EQ(ReserveBlocks(memory, g, 1000000, 1000), 2 + 3);  // M = 8 | W + C = 24
  SessionSpec memory_only{core::KvMode::kMemoryOnly, 0, 0};
  EXPECT_EQ(ReserveBlocks(memory_only, g, 1000000, 1000), 2 + 2);
  EXPECT_EQ(ReserveBlocks(full, g, int64_t{1} << 40, 1000), INT32_MAX);
  // A short prompt (or a decode-only turn) adds fewer rows to a window than a long one.
  EXPECT_EQ(ReserveBlocks(sliding, g, 1000000, 0), ReserveBlocks(sliding, g, 101, 1000));
  EXPECT_EQ(ReserveBlocks(sliding, g, 1000000, 10), ReserveBlocks(sliding, g, 110, 1000));
  EXPECT_EQ(HeldBlocks(g, 0), 1);
  EXPECT_EQ(HeldBlocks(g, 32), 4);
}

TEST(SessionTableTest, OneClaimPerKeyAndEvictionSkipsClaimedSessions) {
  SessionTable table(1 << 20);
  EXPECT_TRUE(table.Claim("a"));
  EXPECT_FALSE(table.Claim("a"));
  auto a = std::make_shared<LiveSession>();
  auto b = std::make_shared<LiveSession>();
  table.Put("a", a);
  table.Put("b", b);
  (void)table.Get("b");  // b is the most recent; a is claimed
  EXPECT_EQ(table.EvictIdle(), b);
  EXPECT_EQ(table.EvictIdle(), nullptr);
  EXPECT_EQ(table.Get("a"), a);
  table.Release("a");
  EXPECT_EQ(table.EvictIdle(), a);
  EXPECT_TRUE(table.Claim("a"));
}

}  // namespace
}  // namespace kvfold::runtime
