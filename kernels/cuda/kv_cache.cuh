// KV-cache writes: storing new (un-rotated) K/V rows into the paged pool, and the KIVI
// int8 quantization of kernels/quant/kv_quant.h on the device (bit-identical codes and
// scales to the CPU reference: same division, same rint, same fp16 rounding).
#ifndef KVFOLD_KERNELS_CUDA_KV_CACHE_CUH_
#define KVFOLD_KERNELS_CUDA_KV_CACHE_CUH_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/cuda/elem_type.h"

namespace kvfold::cuda {

// k_cache[slots[i], :] = k[i, :], v_cache[slots[i], :] = v[i, :] (rounded to cache_type).
// k, v [num_tokens, kv_dim] F32; slots [num_tokens] I32 (slot = block * block_size +
// offset; a negative slot skips the row); caches [num_slots, kv_dim] of a float type.
// Int8 caches are filled with QuantizeKeys / QuantizeValues instead (keys need a whole
// block to get their per-channel scales).
absl::Status StoreKv(const float* k, const float* v, const int32_t* slots, int64_t num_tokens,
                     int64_t kv_dim, void* k_cache, void* v_cache, ElemType cache_type,
                     cudaStream_t stream);

// Per-channel key quantization in groups of group_size tokens.
// keys [num_tokens, channels] F32 -> codes [num_tokens, channels] I8,
// scales [ceil(num_tokens / group_size), channels] F32.
absl::Status QuantizeKeys(const float* keys, int64_t num_tokens, int64_t channels,
                          int32_t group_size, bool fp16_scales, int8_t* codes, float* scales,
                          cudaStream_t stream);

// Per-token value quantization in groups of group_size channels.
// values [num_tokens, channels] F32 -> codes [num_tokens, channels] I8,
// scales [num_tokens, ceil(channels / group_size)] F32.
absl::Status QuantizeValues(const float* values, int64_t num_tokens, int64_t channels,
                            int32_t group_size, bool fp16_scales, int8_t* codes, float* scales,
                            cudaStream_t stream);

// Inverses: x = code * scale, same layouts.
absl::Status DequantizeKeys(const int8_t* codes, const float* scales, int64_t num_tokens,
                            int64_t channels, int32_t group_size, float* keys,
                            cudaStream_t stream);
absl::Status DequantizeValues(const int8_t* codes, const float* scales, int64_t num_tokens,
                              int64_t channels, int32_t group_size, float* values,
                              cudaStream_t stream);

}  // namespace kvfold::cuda

#endif  // KVFOLD_KERNELS_CUDA_KV_CACHE_CUH_
