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
  SessionSpec full{engine::KvMode::kFull, 0, 0};
  EXPECT_EQ(ReserveBlocks(full, g, 0), 0);
  EXPECT_EQ(ReserveBlocks(full, g, 1), 2);
  EXPECT_EQ(ReserveBlocks(full, g, 33), 4);        // 3 blocks + a partial one at the front
  EXPECT_EQ(ReserveBlocks(full, g, 1000000), 62501);
  SessionSpec sliding{engine::KvMode::kSliding, 100, 0};
  EXPECT_EQ(ReserveBlocks(sliding, g, 50), 5);      // below the window: all of it
  EXPECT_EQ(ReserveBlocks(sliding, g, 1000000), ReserveBlocks(sliding, g, 164));
  SessionSpec sink{engine::KvMode::kSink, 100, 4};
  EXPECT_EQ(ReserveBlocks(sink, g, 1000000), 2 + ReserveBlocks(sliding, g, 164));
  SessionSpec memory{engine::KvMode::kMemory, 16, 0};
  EXPECT_EQ(ReserveBlocks(memory, g, 1000000), 2 + 3);  // M = 8 | W + C = 24
  SessionSpec memory_only{engine::KvMode::kMemoryOnly, 0, 0};
  EXPECT_EQ(ReserveBlocks(memory_only, g, 1000000), 2 + 2);
  EXPECT_EQ(ReserveBlocks(full, g, int64_t{1} << 40), INT32_MAX);
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
