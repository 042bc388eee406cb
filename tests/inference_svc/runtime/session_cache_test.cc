#include "inference_svc/runtime/session_cache.h"

#include <gtest/gtest.h>

namespace kvfold::runtime {
namespace {

TEST(LruByteCacheTest, EvictsLeastRecentlyUsedByBytes) {
  LruByteCache<int> cache(100);
  cache.Put("a", std::make_shared<int>(1), 40);
  cache.Put("b", std::make_shared<int>(2), 40);
  ASSERT_NE(cache.Get("a"), nullptr);  // a is now most recent
  auto evicted = cache.Put("c", std::make_shared<int>(3), 30);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(*evicted[0], 2);
  EXPECT_EQ(cache.Get("b"), nullptr);
  EXPECT_EQ(*cache.Get("a"), 1);
  EXPECT_EQ(*cache.Get("c"), 3);
  EXPECT_EQ(cache.used_bytes(), 70u);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(LruByteCacheTest, ReplaceAndEraseKeepAccounting) {
  LruByteCache<int> cache(1000);
  cache.Put("a", std::make_shared<int>(1), 300);
  auto replaced = cache.Put("a", std::make_shared<int>(5), 200);
  ASSERT_EQ(replaced.size(), 1u);
  EXPECT_EQ(*replaced[0], 1);
  EXPECT_EQ(cache.used_bytes(), 200u);
  EXPECT_EQ(*cache.Erase("a"), 5);
  EXPECT_EQ(cache.Erase("a"), nullptr);
  EXPECT_EQ(cache.used_bytes(), 0u);
}

TEST(LruByteCacheTest, EntryLargerThanCapacityIsNotKept) {
  LruByteCache<int> cache(10);
  auto held = std::make_shared<int>(7);
  auto evicted = cache.Put("big", held, 11);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], held);  // the caller's reference stays valid
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.used_bytes(), 0u);
}

}  // namespace
}  // namespace kvfold::runtime
