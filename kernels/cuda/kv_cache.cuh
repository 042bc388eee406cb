// KV-cache writes: storing new (un-rotated) K/V rows into the paged pool, and the KIVI
// int8 quantization of kernels/quant/kv_quant.h on the device (bit-identical codes and
// scales to the CPU reference: same division, same rint, same fp16 rounding).
#ifndef KVFOLD_KERNELS_CUDA_KV_CACHE_CUH_
#define KVFOLD_KERNELS_CUDA_KV_CACHE_CUH_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/attn_rows.h"
#include "core/dtype.h"

namespace kvfold::kernels::cuda {

// Row i of k, v [num_tokens, num_kv_heads * head_dim] F32 goes to slot slots[i] (I32,
// slot = block * block_size + offset) of k_cache, v_cache [num_blocks, num_kv_heads,
// block_size, head_dim] of a float type (kernels::FloatKvIndex; rounded to cache_type).
// Slot indices live on the device: a row whose slot lies outside [0, num_blocks *
// block_size) is skipped. Int8 caches are filled with QuantizeKeys / QuantizeValues
// instead (keys need a whole block to get their per-channel scales).
absl::Status StoreKv(const float* k, const float* v, const int32_t* slots, int64_t num_tokens,
                     int64_t num_kv_heads, int64_t block_size, int64_t head_dim, int64_t num_blocks,
                     void* k_cache, void* v_cache, core::DType cache_type, cudaStream_t stream);

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

// The engine's INT8 KV layer (kernels::KvCacheI8, kernels/backend.h): codes and fp16
// scales per pool block, plus F32 pages holding the entries of open blocks.
struct Int8KvLayer {
  int8_t* k_codes = nullptr;     // [num_blocks, block_size, kv_dim]
  int8_t* v_codes = nullptr;     // [num_blocks, block_size, kv_dim]
  uint16_t* k_scales = nullptr;  // [num_blocks, kv_dim] fp16 bits
  uint16_t* v_scales = nullptr;  // [num_blocks, block_size, ceil(kv_dim / value_group)] fp16
  float* k_pages = nullptr;      // [num_pages, block_size, kv_dim]
  float* v_pages = nullptr;      // [num_pages, block_size, kv_dim]
  int64_t num_blocks = 0;
  int64_t num_pages = 0;
  int32_t block_size = 0;
  int32_t kv_dim = 0;
  int32_t value_group = 0;  // >= 1
};

// kernels::Backend::StoreKvInt8 on the device, bit-identical to the CPU backend:
// 1. row i of k, v [num_tokens, kv_dim] F32 goes to page pages[i] at offset
//    slots[i] % block_size (slots, pages [num_tokens] I32);
// 2. then each of the num_seal blocks of seal [num_seal] (kernels::SealEntry: block, page,
//    count) quantizes entries [0, count) of its page into the block's codes and fp16 scales:
//    keys per channel over the count tokens, values per token in groups of value_group
//    channels (kv_quant.h with fp16_scales; the scale is rounded to fp16 before the codes).
// Device-side indices cannot be checked on the host: a row whose slot or page is out of
// range, and a seal entry out of range (count outside [1, block_size]), is skipped
// (nothing is written) instead of corrupting memory. The two steps are two launches on
// `stream`, so a block sealed in this call sees the rows written by it.
absl::Status StoreKvInt8(const float* k, const float* v, const int32_t* slots,
                         const int32_t* pages, int64_t num_tokens,
                         const kernels::SealEntry* seal, int64_t num_seal,
                         const Int8KvLayer& cache, cudaStream_t stream);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_KV_CACHE_CUH_
