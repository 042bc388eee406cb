// The memory block checksum, computed identically by writers (inference_svc) and by the
// store (memory_svc): XXH3-64 over the header's deterministic protobuf serialization with
// `checksum` and `turn` cleared, followed by the payload bytes; and the turn record's own
// checksum. See docs/memory-block.md.
#ifndef KVFOLD_COMMON_BLOCK_CHECKSUM_H_
#define KVFOLD_COMMON_BLOCK_CHECKSUM_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "common/checksum.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold {

// The header bytes that enter the checksum (checksum field set to 0, the turn record and
// unknown fields left out, deterministic). The turn record stays outside so that a reader
// built before it (which drops it as an unknown field) computes the same checksum.
std::string CanonicalHeaderBytes(const v1::MemoryBlockHeader& header);

// Streaming form: construct with the header, Update() with payload chunks in order.
class BlockChecksummer {
 public:
  explicit BlockChecksummer(const v1::MemoryBlockHeader& header);
  void Update(std::string_view payload_chunk) { hasher_.Update(payload_chunk); }
  uint64_t Digest() const { return hasher_.Digest(); }

 private:
  Xxh3Hasher hasher_;
};

uint64_t BlockChecksum(const v1::MemoryBlockHeader& header, std::string_view payload);

// XXH3-64 over the turn record's deterministic serialization with its `checksum` set to 0
// (unknown fields left out).
uint64_t TurnRecordChecksum(const v1::TurnRecord& turn);
// True when the header carries no turn record or one whose checksum matches.
bool TurnRecordIntact(const v1::MemoryBlockHeader& header);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_BLOCK_CHECKSUM_H_
