// RoPE for queries (and any [num_tokens, heads, head_dim] tensor), HF rotate_half
// convention, from a precomputed table. Keys are NOT rotated here: the cache keeps them
// un-rotated and attention.cu rotates each key by its entry's position (docs/contracts.md).
//
// rope_table [rope_rows, head_dim] F32: row p = cos(p * inv_freq[i]) for i < head_dim/2,
// then sin(p * inv_freq[i]). For pair i (i, i + head_dim/2):
//   out[i]        = x[i] * cos_i - x[i + half] * sin_i
//   out[i + half] = x[i + half] * cos_i + x[i] * sin_i
#ifndef KVFOLD_KERNELS_CUDA_ROPE_CUH_
#define KVFOLD_KERNELS_CUDA_ROPE_CUH_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace kvfold::kernels::cuda {

// x, out [num_tokens, num_heads, head_dim] F32 (may alias); positions [num_tokens] I32.
// A position outside [0, rope_rows) is clamped (the engine grows the table beforehand).
// InvalidArgument for an odd head_dim or bad sizes.
absl::Status Rope(const float* x, const int32_t* positions, const float* rope_table,
                  int32_t rope_rows, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
                  float* out, cudaStream_t stream);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_ROPE_CUH_
