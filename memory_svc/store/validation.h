// Request validation shared by the store (defence in depth) and the service (early, before
// a payload is streamed in). Every function returns OK or a status whose message names the
// offending value. Session ids, tenants and the payload rule are the project's one rule
// each (core/session_id.h, core/block_rules.h; docs/contracts.md).
#ifndef KVFOLD_MEMORY_SVC_STORE_VALIDATION_H_
#define KVFOLD_MEMORY_SVC_STORE_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/session_id.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::memory_svc {

using core::ValidateSessionId;
using core::ValidateTenant;

// INVALID_ARGUMENT for versions that do not fit int64 (a client's negative number).
absl::Status ValidateVersion(uint64_t version, absl::string_view field);

// mem_slots * hidden_size * element size of the payload dtype (DTYPE_FP16 or DTYPE_FP32,
// core::BlockPayloadBytes). INVALID_ARGUMENT for any other dtype (DTYPE_UNSPECIFIED
// included) or a product that does not fit 64 bits.
absl::Status ExpectedPayloadBytes(const v1::MemoryBlockHeader& header, uint64_t* bytes);

// Checks a header before any payload arrives:
//   INVALID_ARGUMENT   format_version != 1, a payload dtype other than FP16/FP32,
//                      payload_size != mem_slots * hidden_size * dtype size
//   RESOURCE_EXHAUSTED serialized header size + payload_size > max_block_bytes
absl::Status ValidateBlockHeader(const v1::MemoryBlockHeader& header, uint64_t max_block_bytes);

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_STORE_VALIDATION_H_
