// Request validation shared by the store (defence in depth) and the service (early, before
// a payload is streamed in). Every function returns OK or a status whose message names the
// offending value.
#ifndef KVFOLD_MEMORY_SVC_STORE_VALIDATION_H_
#define KVFOLD_MEMORY_SVC_STORE_VALIDATION_H_

#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::memory {

inline constexpr size_t kMaxSessionIdBytes = 256;
inline constexpr uint32_t kBlockFormatVersion = 1;

// INVALID_ARGUMENT unless 1..256 printable ASCII characters (0x20..0x7e).
absl::Status ValidateSessionId(absl::string_view session_id);

// INVALID_ARGUMENT unless 1..256 printable ASCII characters without spaces (tenants come
// from the tokens file, never from a request).
absl::Status ValidateTenant(absl::string_view tenant);

// INVALID_ARGUMENT for versions that do not fit int64 (a client's negative number).
absl::Status ValidateVersion(uint64_t version, absl::string_view field);

// mem_slots * hidden_size * element size of dtype (DTYPE_UNSPECIFIED counts as FP16,
// INT4 packs two elements per byte), computed in 128 bits. INVALID_ARGUMENT when the
// product does not fit 64 bits.
absl::Status ExpectedPayloadBytes(const v1::MemoryBlockHeader& header, uint64_t* bytes);

// Checks a header before any payload arrives:
//   INVALID_ARGUMENT   format_version != 1, payload_size != mem_slots*hidden_size*dtype size
//   RESOURCE_EXHAUSTED serialized header size + payload_size > max_block_bytes
absl::Status ValidateBlockHeader(const v1::MemoryBlockHeader& header, uint64_t max_block_bytes);

}  // namespace kvfold::memory

#endif  // KVFOLD_MEMORY_SVC_STORE_VALIDATION_H_
