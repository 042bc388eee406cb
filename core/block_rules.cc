#include "core/block_rules.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace kvfold::core {

absl::StatusOr<uint64_t> BlockPayloadBytes(uint64_t mem_slots, uint64_t hidden_size,
                                           DType dtype) {
  if (!IsBlockPayloadDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("block payload dtype ", DTypeName(dtype),
                                                   " is not supported (f16 or f32)"));
  }
  const unsigned __int128 total =
      static_cast<unsigned __int128>(mem_slots) * hidden_size * DTypeSize(dtype);
  if (total > std::numeric_limits<uint64_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("block payload mem_slots ", mem_slots,
                                                   " x hidden_size ", hidden_size, " x ",
                                                   DTypeName(dtype), " overflows 64 bits"));
  }
  return static_cast<uint64_t>(total);
}

}  // namespace kvfold::core
