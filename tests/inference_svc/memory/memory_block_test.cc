#include "inference_svc/memory/memory_block.h"

#include <random>

#include "common/block_checksum.h"
#include "common/fp16.h"
#include "gtest/gtest.h"

namespace kvfold::memory {
namespace {

using absl::StatusCode;

constexpr char kModel[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
constexpr char kProjector[] = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

// A memory-mode block after 3 folds of C = 8 with 5 window tokens (W = 6, M = 3, d = 7).
MemoryBlock MakeBlock(v1::Dtype dtype, std::vector<float>* memory_out = nullptr) {
  const int mem_slots = 3, hidden_size = 7;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> memory(mem_slots * hidden_size);
  // fp16-representable values, as memory-mode sessions keep them.
  for (float& x : memory) x = Fp16ToFp32(Fp32ToFp16(normal(rng)));
  MemoryBlock block;
  auto& h = block.header;
  h.set_model_fingerprint(kModel);
  h.set_projector_fingerprint(kProjector);
  h.set_mem_slots(mem_slots);
  h.set_hidden_size(hidden_size);
  h.set_dtype(dtype);
  h.set_tokens_folded(24);
  h.set_total_tokens(29);
  for (int id : {5, 17, 3, 250, 0}) h.add_window_token_ids(id);
  h.mutable_sampler_state()->mutable_params()->set_temperature(0.7f);
  for (uint64_t w : {1ull, 2ull, 3ull, 0xffffffffffffffffull}) h.mutable_sampler_state()->add_rng_state(w);
  h.set_kv_mode(v1::KV_MODE_MEMORY);
  h.set_window_size(6);
  h.set_chunk_size(8);
  block.payload = *EncodeMemoryPayload(memory, dtype);
  SealMemoryBlock(&block);
  if (memory_out) *memory_out = memory;
  return block;
}

BlockExpectations Expect() {
  BlockExpectations e;
  e.model_fingerprint = kModel;
  e.hidden_size = 7;
  e.projector_fingerprint = kProjector;
  e.projector_mem_slots = 3;
  e.vocab_size = 256;
  return e;
}

TEST(MemoryBlockTest, RoundTripThroughFileFp16AndFp32) {
  for (v1::Dtype dtype : {v1::DTYPE_FP16, v1::DTYPE_FP32}) {
    std::vector<float> memory;
    const MemoryBlock block = MakeBlock(dtype, &memory);
    EXPECT_EQ(block.header.payload_size(), memory.size() * (dtype == v1::DTYPE_FP16 ? 2 : 4));
    EXPECT_EQ(block.header.format_version(), 1u);
    const std::string file = SerializeMemoryBlock(block);
    EXPECT_EQ(file.substr(0, 4), "KVFB");
    auto parsed = ParseMemoryBlock(file);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ASSERT_TRUE(ValidateMemoryBlock(parsed->header, parsed->payload, Expect()).ok());
    EXPECT_EQ(parsed->header.SerializeAsString(), block.header.SerializeAsString());
    auto decoded = DecodeMemoryPayload(parsed->header, parsed->payload);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, memory);  // exact: the values are fp16-representable
    EXPECT_EQ(parsed->header.sampler_state().rng_state(3), 0xffffffffffffffffull);
  }
}

TEST(MemoryBlockTest, PayloadLayoutIsLittleEndianFp16) {
  const std::vector<float> memory = {1.0f, -2.0f};
  auto payload = EncodeMemoryPayload(memory, v1::DTYPE_FP16);
  ASSERT_TRUE(payload.ok());
  EXPECT_EQ(*payload, std::string("\x00\x3c\x00\xc0", 4));
  EXPECT_EQ(EncodeMemoryPayload(memory, v1::DTYPE_BF16).status().code(), StatusCode::kInvalidArgument);
}

TEST(MemoryBlockTest, Llama31_8bShapePayloadIs786432Bytes) {
  const int mem_slots = 96, hidden_size = 4096;
  std::vector<float> memory(mem_slots * hidden_size, 0.25f);
  MemoryBlock block;
  block.header.set_mem_slots(mem_slots);
  block.header.set_hidden_size(hidden_size);
  block.header.set_dtype(v1::DTYPE_FP16);
  block.payload = *EncodeMemoryPayload(memory, v1::DTYPE_FP16);
  SealMemoryBlock(&block);
  EXPECT_EQ(block.payload.size(), 786432u);
  EXPECT_EQ(block.header.payload_size(), 786432u);
}

TEST(MemoryBlockTest, CorruptionIsDataLoss) {
  const MemoryBlock block = MakeBlock(v1::DTYPE_FP16);
  MemoryBlock bad = block;
  bad.payload[5] ^= 0x10;
  EXPECT_EQ(ValidateMemoryBlock(bad.header, bad.payload, Expect()).code(), StatusCode::kDataLoss);
  bad = block;
  bad.header.set_total_tokens(30);  // header field changed after sealing
  EXPECT_EQ(ValidateMemoryBlock(bad.header, bad.payload, Expect()).code(), StatusCode::kDataLoss);
  bad = block;
  bad.payload.pop_back();
  EXPECT_EQ(ValidateMemoryBlock(bad.header, bad.payload, Expect()).code(), StatusCode::kDataLoss);

  // Every single-byte flip and every truncation of the file is rejected, never UB.
  const std::string file = SerializeMemoryBlock(block);
  for (size_t i = 0; i < file.size(); ++i) {
    std::string flipped = file;
    flipped[i] ^= 0x01;
    auto parsed = ParseMemoryBlock(flipped);
    if (parsed.ok()) {
      EXPECT_FALSE(ValidateMemoryBlock(parsed->header, parsed->payload, Expect()).ok()) << i;
    }
  }
  for (size_t n = 0; n < file.size(); ++n) {
    auto parsed = ParseMemoryBlock(file.substr(0, n));
    EXPECT_FALSE(parsed.ok()) << n;
    if (n >= 4) {
      EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss) << n;
    }
  }
  EXPECT_EQ(ParseMemoryBlock(file + "x").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ParseMemoryBlock("KVFC" + file.substr(4)).status().code(), StatusCode::kInvalidArgument);
}

TEST(MemoryBlockTest, MismatchesAreFailedPrecondition) {
  const MemoryBlock block = MakeBlock(v1::DTYPE_FP16);
  BlockExpectations e = Expect();
  e.model_fingerprint[0] = 'a';
  EXPECT_EQ(ValidateMemoryBlock(block.header, block.payload, e).code(), StatusCode::kFailedPrecondition);
  e = Expect();
  e.hidden_size = 8;
  EXPECT_EQ(ValidateMemoryBlock(block.header, block.payload, e).code(), StatusCode::kFailedPrecondition);
  e = Expect();
  e.projector_fingerprint = "other";
  EXPECT_EQ(ValidateMemoryBlock(block.header, block.payload, e).code(), StatusCode::kFailedPrecondition);
  e = Expect();
  e.projector_mem_slots = 4;
  EXPECT_EQ(ValidateMemoryBlock(block.header, block.payload, e).code(), StatusCode::kFailedPrecondition);
  e = Expect();
  e.projector_fingerprint.clear();  // a replica without a projector
  EXPECT_EQ(ValidateMemoryBlock(block.header, block.payload, e).code(), StatusCode::kFailedPrecondition);
  MemoryBlock future = block;
  future.header.set_format_version(3);
  future.header.set_checksum(0);
  future.header.set_checksum(BlockChecksum(future.header, future.payload));
  EXPECT_EQ(ValidateMemoryBlock(future.header, future.payload, Expect()).code(),
            StatusCode::kFailedPrecondition);
  // Refused by its version before its checksum, which a later format may compute over
  // fields this reader does not know.
  future.header.set_checksum(future.header.checksum() ^ 1);
  EXPECT_EQ(ValidateMemoryBlock(future.header, future.payload, Expect()).code(),
            StatusCode::kFailedPrecondition);
}

// A turn record has its own checksum and stays outside the block's, so the block verifies
// as a reader that predates the field (and drops it as unknown) sees it; a changed record
// fails its own checksum.
TEST(MemoryBlockTest, ATurnRecordHasItsOwnChecksumOutsideTheBlocks) {
  MemoryBlock block = MakeBlock(v1::DTYPE_FP16);
  const uint64_t without = block.header.checksum();
  block.header.mutable_turn()->set_front_record(R"({"text":"Once"})");
  block.header.mutable_turn()->set_generated_tokens(3);
  SealMemoryBlock(&block);
  EXPECT_EQ(block.header.format_version(), 1u);
  EXPECT_EQ(block.header.checksum(), without);
  EXPECT_NE(block.header.turn().checksum(), 0u);
  EXPECT_TRUE(ValidateMemoryBlock(block.header, block.payload, Expect()).ok());
  MemoryBlock old_reader = block;
  old_reader.header.clear_turn();
  EXPECT_TRUE(ValidateMemoryBlock(old_reader.header, old_reader.payload, Expect()).ok());
  MemoryBlock changed = block;
  changed.header.mutable_turn()->set_generated_tokens(4);
  const absl::Status s = ValidateMemoryBlock(changed.header, changed.payload, Expect());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("turn record"), std::string_view::npos) << s;
  // Through the file form too.
  auto parsed = ParseMemoryBlock(SerializeMemoryBlock(block));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->header.turn().front_record(), R"({"text":"Once"})");
  EXPECT_TRUE(ValidateMemoryBlock(parsed->header, parsed->payload, Expect()).ok());
}

// Blocks whose checksum is right but whose content does not add up (a buggy writer).
TEST(MemoryBlockTest, InconsistentBlocksAreInvalidArgument) {
  auto resealed = [](MemoryBlock b, auto mutate) {
    mutate(&b);
    b.header.set_checksum(0);
    b.header.set_checksum(BlockChecksum(b.header, b.payload));
    return ValidateMemoryBlock(b.header, b.payload, Expect()).code();
  };
  const MemoryBlock block = MakeBlock(v1::DTYPE_FP16);
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_mem_slots(2); b->payload.resize(28); b->header.set_payload_size(28); }),
            StatusCode::kFailedPrecondition);  // M = 2 is another projector's M
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_payload_size(b->payload.size() + 2); b->payload += "xx"; }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_dtype(v1::DTYPE_INT8); }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_kv_mode(v1::KV_MODE_UNSPECIFIED); }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_tokens_folded(16); }),
            StatusCode::kInvalidArgument);  // total != folded + window
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_tokens_folded(20); b->header.set_total_tokens(25); }),
            StatusCode::kInvalidArgument);  // not a multiple of C
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) {
              for (int i = 0; i < 10; ++i) b->header.add_window_token_ids(1);
              b->header.set_total_tokens(39);
            }),
            StatusCode::kInvalidArgument);  // 15 > W + C = 14
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_window_token_ids(1, 256); }),
            StatusCode::kInvalidArgument);  // out of vocab
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_window_token_ids(1, -1); }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) {
              b->header.set_kv_mode(v1::KV_MODE_MEMORY_ONLY);
              b->header.set_window_size(9);
            }),
            StatusCode::kInvalidArgument);  // memory_only with W = 9 > C = 8
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_kv_mode(v1::KV_MODE_MEMORY_ONLY); }),
            StatusCode::kOk);  // memory_only with W = 6 <= C: its memory_only_window
  // Memory modes may keep sink ids (the projector's sink tokens); they count in the total.
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) {
              b->header.set_sink_tokens(2);
              b->header.add_sink_token_ids(3);
              b->header.add_sink_token_ids(4);
              b->header.set_total_tokens(b->header.total_tokens() + 2);
            }),
            StatusCode::kOk);
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) {
              b->header.set_sink_tokens(2);
              b->header.add_sink_token_ids(3);
              b->header.add_sink_token_ids(4);
            }),
            StatusCode::kInvalidArgument);  // total != folded + window + sinks
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) {
              b->header.add_sink_token_ids(3);
              b->header.set_total_tokens(b->header.total_tokens() + 1);
            }),
            StatusCode::kInvalidArgument);  // more sink ids than sink_tokens (0)
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->header.set_kv_mode(v1::KV_MODE_FULL); }),
            StatusCode::kInvalidArgument);  // a plain mode carrying memory
  EXPECT_EQ(resealed(block, [](MemoryBlock* b) { b->payload[0] = 0x00; b->payload[1] = 0x7c; }),
            StatusCode::kInvalidArgument);  // +inf in memory
}

TEST(MemoryBlockTest, PlainModeBlockHasEmptyPayload) {
  MemoryBlock block;
  block.header.set_model_fingerprint(kModel);
  block.header.set_hidden_size(7);
  block.header.set_dtype(v1::DTYPE_FP16);
  block.header.set_kv_mode(v1::KV_MODE_SINK);
  block.header.set_window_size(4);
  block.header.set_sink_tokens(2);
  block.header.add_sink_token_ids(1);
  block.header.add_sink_token_ids(2);
  for (int id : {7, 8, 9}) block.header.add_window_token_ids(id);
  block.header.set_total_tokens(100);
  SealMemoryBlock(&block);
  BlockExpectations e = Expect();
  e.projector_fingerprint.clear();
  EXPECT_TRUE(ValidateMemoryBlock(block.header, block.payload, e).ok());
  auto parsed = ParseMemoryBlock(SerializeMemoryBlock(block));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->payload.size(), 0u);
  EXPECT_TRUE(ValidateMemoryBlock(parsed->header, parsed->payload, e).ok());
}

}  // namespace
}  // namespace kvfold::memory
