// The memory block's payload rule, shared by the replicas that write and read blocks and by
// the store that keeps them (docs/contracts.md, "The memory block").
#ifndef KVFOLD_CORE_BLOCK_RULES_H_
#define KVFOLD_CORE_BLOCK_RULES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace kvfold::core {

// MemoryBlockHeader.format_version of every block written today.
inline constexpr uint32_t kBlockFormatVersion = 1;

// A payload is mem_slots x hidden_size values of f16 or f32, nothing else.
constexpr bool IsBlockPayloadDType(DType dtype) {
  return dtype == DType::kF16 || dtype == DType::kF32;
}

// mem_slots * hidden_size * DTypeSize(dtype), computed in 128 bits. InvalidArgument for a
// dtype that is not a payload dtype or a product that does not fit 64 bits.
absl::StatusOr<uint64_t> BlockPayloadBytes(uint64_t mem_slots, uint64_t hidden_size,
                                           DType dtype);

}  // namespace kvfold::core

#endif  // KVFOLD_CORE_BLOCK_RULES_H_
