#include "memory_svc/store/records.h"

#include <gtest/gtest.h>

#include "memory_svc/store/validation.h"

namespace kvfold::memory_svc {
namespace {

TEST(RecordsTest, VersionKeysSortNumerically) {
  // Big-endian versions: byte order must equal numeric order across byte boundaries.
  const uint64_t versions[] = {1, 2, 255, 256, 65535, 65536, 1ull << 40, ~0ull >> 1};
  for (size_t i = 1; i < std::size(versions); ++i) {
    EXPECT_LT(VersionKey("t", "s", versions[i - 1]), VersionKey("t", "s", versions[i]));
  }
  // Every version of "s" sorts inside [prefix, prefix_end) and before session "s " / "s0".
  EXPECT_GE(VersionKey("t", "s", 0), VersionPrefix("t", "s"));
  EXPECT_LT(VersionKey("t", "s", ~0ull), VersionPrefixEnd("t", "s"));
  EXPECT_LT(VersionPrefixEnd("t", "s"), VersionKey("t", "s ", 1));
  EXPECT_LT(SessionKey("t", "a"), SessionKey("t", "a b"));
  EXPECT_LT(SessionKey("t", "zzz"), SessionKey("u", "a"));
  EXPECT_EQ(SessionKey("ten", "x"), std::string("ten\0x", 5));
  EXPECT_EQ(VersionKey("t", "s", 258), std::string("t\0s\0\0\0\0\0\0\0\x01\x02", 12));
}

TEST(RecordsTest, SessionMetaRoundTripAndDamage) {
  SessionMeta meta;
  meta.head_version = 41;
  meta.latest_version = 43;
  meta.created_unix_ms = 1700000000123;
  meta.updated_unix_ms = 1700000009999;
  meta.total_tokens = 123457;
  meta.versions = {3, 40, 41, 42, 43};
  meta.pinned = {3, 42};
  const std::string bytes = EncodeSessionMeta(meta);
  absl::StatusOr<SessionMeta> back = DecodeSessionMeta(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->head_version, 41u);
  EXPECT_EQ(back->latest_version, 43u);
  EXPECT_EQ(back->created_unix_ms, 1700000000123);
  EXPECT_EQ(back->updated_unix_ms, 1700000009999);
  EXPECT_EQ(back->total_tokens, 123457u);
  EXPECT_EQ(back->versions, meta.versions);
  EXPECT_EQ(back->pinned, meta.pinned);
  EXPECT_TRUE(back->IsPinned(42));
  EXPECT_FALSE(back->IsPinned(41));
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string damaged = bytes;
    damaged[i] ^= 0x10;
    EXPECT_EQ(DecodeSessionMeta(damaged).status().code(), absl::StatusCode::kDataLoss) << i;
  }
  EXPECT_EQ(DecodeSessionMeta(bytes.substr(0, 20)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(RecordsTest, VersionRecordRoundTrip) {
  VersionRecord record;
  record.created_unix_ms = 1234567;
  record.header.set_format_version(1);
  record.header.set_mem_slots(96);
  record.header.set_checksum(0xdeadbeefcafeull);
  absl::StatusOr<VersionRecord> back = DecodeVersionRecord(EncodeVersionRecord(record));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->created_unix_ms, 1234567);
  EXPECT_EQ(back->header.mem_slots(), 96u);
  EXPECT_EQ(back->header.checksum(), 0xdeadbeefcafeull);
  EXPECT_EQ(DecodeVersionRecord("Vx").status().code(), absl::StatusCode::kDataLoss);
}

TEST(RecordsTest, RetentionKeepsNewestPinnedAndHead) {
  SessionMeta meta;
  meta.versions = {1, 2, 3, 4, 5, 6, 7};
  meta.pinned = {2};
  meta.head_version = 3;  // rolled back
  EXPECT_EQ(RetentionVictims(meta, 3), (std::vector<uint64_t>{1, 4}));
  EXPECT_EQ(RetentionVictims(meta, 7), std::vector<uint64_t>{});
  EXPECT_EQ(RetentionVictims(meta, 1), (std::vector<uint64_t>{1, 4, 5, 6}));
}

// The store applies the replicas' rule (core/session_id.h): no spaces.
TEST(ValidationTest, SessionIds) {
  EXPECT_TRUE(ValidateSessionId("a").ok());
  EXPECT_TRUE(ValidateSessionId("agent-7/turn~x").ok());
  EXPECT_EQ(ValidateSessionId("agent 7").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateSessionId(std::string(256, 'x')).ok());
  EXPECT_EQ(ValidateSessionId("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId(std::string(257, 'x')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId("tab\there").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId(std::string("nul\0x", 5)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId("caf\xc3\xa9").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSessionId("del\x7f").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateVersion(~0ull, "version").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateVersion(~0ull, "version").message(),
            "version 18446744073709551615 is out of range (at most 9223372036854775807; as a "
            "signed number it reads -1)");
  EXPECT_TRUE(ValidateVersion(1ull << 62, "version").ok());
}

TEST(ValidationTest, HeaderSizes) {
  v1::MemoryBlockHeader h;
  h.set_format_version(1);
  h.set_mem_slots(96);
  h.set_hidden_size(4096);
  h.set_dtype(v1::DTYPE_FP16);
  h.set_payload_size(786432);  // the Llama-3.1-8B block
  EXPECT_TRUE(ValidateBlockHeader(h, 64 << 20).ok());
  EXPECT_EQ(ValidateBlockHeader(h, 786431).code(), absl::StatusCode::kResourceExhausted);
  h.set_payload_size(786430);
  EXPECT_EQ(ValidateBlockHeader(h, 64 << 20).code(), absl::StatusCode::kInvalidArgument);
  h.set_dtype(v1::DTYPE_FP32);
  h.set_mem_slots(3);
  h.set_hidden_size(5);
  h.set_payload_size(60);
  EXPECT_TRUE(ValidateBlockHeader(h, 64 << 20).ok());
  // The payload is FP16 or FP32 only (core/block_rules.h), as on the replicas.
  for (v1::Dtype other : {v1::DTYPE_UNSPECIFIED, v1::DTYPE_BF16, v1::DTYPE_INT8, v1::DTYPE_INT4}) {
    h.set_dtype(other);
    h.set_payload_size(15);
    EXPECT_EQ(ValidateBlockHeader(h, 64 << 20).code(), absl::StatusCode::kInvalidArgument)
        << v1::Dtype_Name(other);
  }
  h.set_dtype(v1::DTYPE_FP32);
  h.set_payload_size(60);
  h.set_format_version(2);
  EXPECT_EQ(ValidateBlockHeader(h, 64 << 20).code(), absl::StatusCode::kInvalidArgument);
  // A turn record counts toward the block's size.
  h.set_format_version(1);
  h.mutable_turn()->set_front_record(std::string(1000, 'x'));
  EXPECT_EQ(ValidateBlockHeader(h, 1000).code(), absl::StatusCode::kResourceExhausted);
}

// mem_slots x hidden_size x 4 = 2^64 wraps to 0 in 64 bits: an empty payload must not pass
// as "the right size" of an 8-EiB block.
TEST(ValidationTest, PayloadSizeOverflowIsInvalid) {
  v1::MemoryBlockHeader h;
  h.set_format_version(1);
  h.set_mem_slots(1u << 31);
  h.set_hidden_size(1u << 31);
  h.set_dtype(v1::DTYPE_FP32);
  h.set_payload_size(0);
  uint64_t bytes = 0;
  const absl::Status s = ExpectedPayloadBytes(h, &bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overflows"), absl::string_view::npos) << s;
  EXPECT_EQ(ValidateBlockHeader(h, 64 << 20).code(), absl::StatusCode::kInvalidArgument);
  // 2^63 still fits: FP16 of the same shape is a (too large) valid size.
  h.set_dtype(v1::DTYPE_FP16);
  ASSERT_TRUE(ExpectedPayloadBytes(h, &bytes).ok());
  EXPECT_EQ(bytes, 1ull << 63);
}

// The limit counts the whole block: a huge header (window ids) with a tiny payload is over it.
TEST(ValidationTest, MaxBlockBytesCountsTheHeader) {
  v1::MemoryBlockHeader h;
  h.set_format_version(1);
  h.set_mem_slots(2);
  h.set_hidden_size(8);
  h.set_dtype(v1::DTYPE_FP16);
  h.set_payload_size(32);
  for (int i = 0; i < 300000; ++i) h.add_window_token_ids(3000000 + i);  // 4 B each packed
  ASSERT_GT(h.ByteSizeLong(), 1u << 20);
  const absl::Status s = ValidateBlockHeader(h, 1 << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("header"), absl::string_view::npos) << s;
  EXPECT_TRUE(ValidateBlockHeader(h, 2 << 20).ok());
  // Exactly at the limit passes; one byte below fails.
  const uint64_t whole = h.ByteSizeLong() + h.payload_size();
  EXPECT_TRUE(ValidateBlockHeader(h, whole).ok());
  EXPECT_EQ(ValidateBlockHeader(h, whole - 1).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kvfold::memory_svc
