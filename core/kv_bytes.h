// KV-cache accounting: what one pool block and one token cost in a given KV dtype. The one
// formula behind the engine's pool, the service's admission and GetModelInfo, and the
// planner (docs/contracts.md, "KV bytes").
//
// Per layer and block of B tokens (kv_dim = num_kv_heads * head_dim):
//   float dtypes (f32, f16, bf16, f8):  2 * B * kv_dim * bytes(dtype)          (K and V)
//   int8 / int4 codes (KIVI layout):    2 * ceil(B * kv_dim * bits / 8)       codes
//                                     + kv_dim * 2                            key scales
//                                       (fp16, one per channel per block)
//                                     + B * ceil(kv_dim / value_group) * 2    value scales
//                                       (fp16, per token per group of channels)
// KvBytesPerToken = ceil(KvBytesPerBlock / B). Every product is checked: InvalidArgument on
// uint64 overflow or a non-positive size.
#ifndef KVFOLD_CORE_KV_BYTES_H_
#define KVFOLD_CORE_KV_BYTES_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace kvfold::core {

struct KvLayout {
  uint64_t num_layers = 0;
  uint64_t kv_dim = 0;  // num_kv_heads * head_dim
  DType dtype = DType::kF32;  // f32, f16, bf16, f8, int8 or int4 (InvalidArgument otherwise)
  uint64_t block_size = 16;   // tokens per pool block (the engine's default)
  // Channels per value scale (int8/int4), clamped to kv_dim as the engine does. Default: 32.
  uint64_t value_group = 32;
};

absl::StatusOr<uint64_t> KvBytesPerBlock(const KvLayout& layout);
absl::StatusOr<uint64_t> KvBytesPerToken(const KvLayout& layout);

}  // namespace kvfold::core

#endif  // KVFOLD_CORE_KV_BYTES_H_
