#include "core/session_geometry.h"

#include <gtest/gtest.h>

#include <string>

namespace kvfold::core {
namespace {

absl::StatusCode Code(KvMode mode, int64_t w, int64_t s, int64_t c, int64_t m) {
  return ValidateSessionGeometry({mode, w, s, c, m}).code();
}

constexpr absl::StatusCode kOk = absl::StatusCode::kOk;
constexpr absl::StatusCode kBad = absl::StatusCode::kInvalidArgument;

TEST(SessionGeometryTest, EachModeItsOwnSizes) {
  EXPECT_EQ(Code(KvMode::kFull, 0, 0, 0, 0), kOk);
  EXPECT_EQ(Code(KvMode::kFull, 16, 0, 0, 0), kBad);
  EXPECT_EQ(Code(KvMode::kSliding, 16, 0, 0, 0), kOk);
  EXPECT_EQ(Code(KvMode::kSliding, 0, 0, 0, 0), kBad);
  EXPECT_EQ(Code(KvMode::kSliding, 16, 4, 0, 0), kBad);
  EXPECT_EQ(Code(KvMode::kSink, 16, 4, 0, 0), kOk);
  EXPECT_EQ(Code(KvMode::kSink, 16, 0, 0, 0), kOk);
  EXPECT_EQ(Code(KvMode::kSink, 16, 4, 8, 0), kBad);
  EXPECT_EQ(Code(KvMode::kMemory, 64, 0, 32, 8), kOk);
  EXPECT_EQ(Code(KvMode::kMemory, 64, 0, 32, 0), kOk);  // nothing folded yet
  EXPECT_EQ(Code(KvMode::kMemory, 0, 0, 32, 8), kBad);
  EXPECT_EQ(Code(KvMode::kMemory, 64, 0, 0, 8), kBad);
  EXPECT_EQ(Code(KvMode::kMemory, 64, 4, 32, 8), kOk);  // memory + S sink tokens
  EXPECT_EQ(Code(KvMode::kMemoryOnly, 0, 0, 32, 8), kOk);
  EXPECT_EQ(Code(KvMode::kMemoryOnly, 16, 4, 32, 8), kOk);  // memory_only_window <= C, sinks
  EXPECT_EQ(Code(KvMode::kMemoryOnly, 32, 0, 32, 8), kOk);
  EXPECT_EQ(Code(KvMode::kMemoryOnly, 64, 0, 32, 8), kBad);
}

TEST(SessionGeometryTest, BoundsAndMessages) {
  EXPECT_EQ(Code(KvMode::kSliding, kMaxGeometryTokens, 0, 0, 0), kOk);
  EXPECT_EQ(Code(KvMode::kSliding, kMaxGeometryTokens + 1, 0, 0, 0), kBad);
  EXPECT_EQ(Code(KvMode::kSink, 16, -1, 0, 0), kBad);
  const absl::Status s = ValidateSessionGeometry({KvMode::kMemoryOnly, 33, 0, 32, 8});
  EXPECT_NE(std::string(s.message()).find("window_size 33 exceeds chunk_size 32 in mode memory_only"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace kvfold::core
