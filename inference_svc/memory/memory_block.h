// The memory block: a session checkpoint = v1::MemoryBlockHeader + payload (the memory
// vectors, mem_slots x hidden_size, fp16 little-endian by default, fp32 optional), with an
// XXH3-64 checksum over both (common/block_checksum.h). Byte layout: docs/memory-block.md.
//
// Every KV mode checkpoints through this format (plain modes have mem_slots = 0 and an
// empty payload); the mapping from a Session's state lives in session_block.h. This file
// only builds, checks and (de)serializes blocks, so memory_svc-side tools can use it too.
#ifndef KVFOLD_INFERENCE_SVC_MEMORY_MEMORY_BLOCK_H_
#define KVFOLD_INFERENCE_SVC_MEMORY_MEMORY_BLOCK_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/block_rules.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::memory {

inline constexpr uint32_t kMemoryBlockFormatVersion = core::kBlockFormatVersion;

struct MemoryBlock {
  v1::MemoryBlockHeader header;
  std::string payload;  // header.payload_size bytes
};

// Bytes per payload element: 2 for DTYPE_FP16, 4 for DTYPE_FP32, 0 for anything else
// (core::IsBlockPayloadDType, the rule the store applies too).
int PayloadElementBytes(v1::Dtype dtype);

// Encodes memory [mem_slots, hidden_size] as little-endian `dtype` (fp16: round to nearest
// even, so values already representable in fp16 round-trip exactly).
// InvalidArgument for other dtypes.
absl::StatusOr<std::string> EncodeMemoryPayload(std::span<const float> memory, v1::Dtype dtype);

// Sets format_version, payload_size and checksum of `block->header` (and the turn record's
// checksum, when it has one) from its other fields and `block->payload` (call after
// filling everything else).
void SealMemoryBlock(MemoryBlock* block);

// What the reader's side requires of a block.
struct BlockExpectations {
  std::string model_fingerprint;      // must equal the header's
  int hidden_size = 0;                // must equal the header's
  // Memory modes only: the projector the replica runs; a block made with another
  // projector, or with mem_slots other than 0 or projector_mem_slots, is rejected.
  std::string projector_fingerprint;
  int projector_mem_slots = 0;
  int vocab_size = 0;                 // > 0: every token id must be < vocab_size
};

// Checks a received block completely before anything uses it:
//   DATA_LOSS            checksum mismatch (the block's or its turn record's), or payload
//                        length != header.payload_size
//   FAILED_PRECONDITION  unsupported format_version (checked before the checksum); other
//                        model (fingerprint or hidden_size); memory mode block of
//                        another projector or M
//   INVALID_ARGUMENT     internally inconsistent header (payload_size != M x d x dtype,
//                        unknown dtype or mode, window longer than the mode allows,
//                        token counts that do not add up, negative or out-of-vocab ids,
//                        non-finite memory values)
absl::Status ValidateMemoryBlock(const v1::MemoryBlockHeader& header, std::string_view payload,
                                 const BlockExpectations& expected);

// Decodes the payload into fp32 [mem_slots, hidden_size]. Call after ValidateMemoryBlock;
// InvalidArgument if the sizes do not fit (never reads out of bounds).
absl::StatusOr<std::vector<float>> DecodeMemoryPayload(const v1::MemoryBlockHeader& header,
                                                       std::string_view payload);

// Single-buffer form for files and tests (docs/memory-block.md):
//   "KVFB" | u32 LE file version (1) | u32 LE header length N | N header bytes
//   (deterministic protobuf) | header.payload_size payload bytes. Nothing after it.
std::string SerializeMemoryBlock(const MemoryBlock& block);
// INVALID_ARGUMENT: not a KVFB buffer (magic) or unknown file version.
// DATA_LOSS: truncated, trailing bytes, unparsable header, or payload_size beyond the end.
// The checksum is NOT checked here; call ValidateMemoryBlock next.
absl::StatusOr<MemoryBlock> ParseMemoryBlock(std::string_view bytes);

}  // namespace kvfold::memory

#endif  // KVFOLD_INFERENCE_SVC_MEMORY_MEMORY_BLOCK_H_
