#include "kernels/cuda/kv_cache.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvfold::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Same operations as kvfold::quant::Int8Scale / Int8Code (kernels/quant/kv_quant.cc).
__device__ __forceinline__ float Int8Scale(float amax, bool fp16_scales) {
  float scale = amax / 127.0f;
  if (fp16_scales) scale = __half2float(__float2half_rn(scale));
  return scale;
}

__device__ __forceinline__ int8_t Int8Code(float x, float scale) {
  if (scale == 0.0f) return 0;
  return static_cast<int8_t>(fminf(fmaxf(rintf(x / scale), -127.0f), 127.0f));
}

// grid num_tokens, block kThreads. Channel c of a row is element c % head_dim of KV head
// c / head_dim (kernels::FloatKvIndex).
__global__ void StoreKvKernel(const float* k, const float* v,  // [num_tokens, kv_dim]
                              const int32_t* slots,            // [num_tokens]
                              int64_t heads, int64_t block_size, int64_t head_dim,
                              int64_t num_slots, void* k_cache, void* v_cache,
                              core::DType cache_type) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slots[token];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t kv_dim = heads * head_dim;
  for (int64_t c = threadIdx.x; c < kv_dim; c += blockDim.x) {
    const int64_t i =
        kernels::FloatKvIndex(slot, c / head_dim, c % head_dim, heads, block_size, head_dim);
    StoreElem(k_cache, i, cache_type, k[token * kv_dim + c]);
    StoreElem(v_cache, i, cache_type, v[token * kv_dim + c]);
  }
}

// grid (num_groups, ceil(channels / kThreads)); one thread per channel of a token group.
__global__ void QuantizeKeysKernel(const float* keys,  // [num_tokens, channels]
                                   int64_t num_tokens, int64_t channels, int32_t group_size,
                                   bool fp16_scales, int8_t* codes,  // [num_tokens, channels]
                                   float* scales) {                  // [num_groups, channels]
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * group_size;
  const int64_t t1 = min(num_tokens, t0 + group_size);
  float amax = 0.0f;
  for (int64_t t = t0; t < t1; ++t) amax = fmaxf(amax, fabsf(keys[t * channels + c]));
  const float scale = Int8Scale(amax, fp16_scales);
  scales[blockIdx.x * channels + c] = scale;
  for (int64_t t = t0; t < t1; ++t) codes[t * channels + c] = Int8Code(keys[t * channels + c], scale);
}

// One warp per (token, channel group); grid ceil(num_tokens * groups / 8), block 256.
__global__ void QuantizeValuesKernel(const float* values,  // [num_tokens, channels]
                                     int64_t num_tokens, int64_t channels, int32_t group_size,
                                     int64_t groups, bool fp16_scales,
                                     int8_t* codes,   // [num_tokens, channels]
                                     float* scales) {  // [num_tokens, groups]
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (item >= num_tokens * groups) return;  // warp-uniform
  const int64_t t = item / groups, g = item % groups;
  const int64_t c0 = g * group_size, c1 = min(channels, c0 + group_size);
  const float* row = values + t * channels;
  float amax = 0.0f;
  for (int64_t c = c0 + lane; c < c1; c += 32) amax = fmaxf(amax, fabsf(row[c]));
  amax = WarpMax(amax);
  const float scale = Int8Scale(amax, fp16_scales);
  if (lane == 0) scales[t * groups + g] = scale;
  for (int64_t c = c0 + lane; c < c1; c += 32) codes[t * channels + c] = Int8Code(row[c], scale);
}

__global__ void DequantizeKernel(const int8_t* codes, const float* scales, int64_t num_tokens,
                                 int64_t channels, int32_t group_size, bool per_channel_keys,
                                 float* out) {
  const int64_t n = num_tokens * channels;
  const int64_t groups = (channels + group_size - 1) / group_size;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / channels, c = i % channels;
    const float scale = per_channel_keys ? scales[(t / group_size) * channels + c]
                                         : scales[t * groups + c / group_size];
    out[i] = static_cast<float>(codes[i]) * scale;
  }
}

// grid num_tokens, block kThreads: row i into its page (StoreKvInt8 step 1).
__global__ void StorePagesKernel(const float* k, const float* v,  // [num_tokens, kv_dim]
                                 const int32_t* slots, const int32_t* pages,  // [num_tokens]
                                 Int8KvLayer c) {
  const int64_t token = blockIdx.x;
  const int32_t slot = slots[token], page = pages[token];
  if (slot < 0 || slot >= c.num_blocks * c.block_size || page < 0 || page >= c.num_pages) return;
  const int64_t dst = (static_cast<int64_t>(page) * c.block_size + slot % c.block_size) * c.kv_dim;
  const int64_t src = token * c.kv_dim;
  for (int64_t ch = threadIdx.x; ch < c.kv_dim; ch += blockDim.x) {
    c.k_pages[dst + ch] = k[src + ch];
    c.v_pages[dst + ch] = v[src + ch];
  }
}

// The fp16 scale for `amax` and its bits: Int8Scale(amax, true) of kv_quant.cc.
__device__ __forceinline__ float Fp16Scale(float amax, uint16_t* bits) {
  const __half h = __float2half_rn(amax / 127.0f);
  *bits = __half_as_ushort(h);
  return __half2float(h);
}

// grid num_seal, block kThreads: one block (of the pool) per CUDA block (StoreKvInt8 step 2).
__global__ void SealBlocksKernel(const kernels::SealEntry* seal,  // [num_seal]
                                 Int8KvLayer c) {
  const kernels::SealEntry f = seal[blockIdx.x];
  const int32_t block = f.block, page = f.page, count = f.count;
  if (block < 0 || block >= c.num_blocks || page < 0 || page >= c.num_pages || count < 1 ||
      count > c.block_size) {
    return;  // block-uniform
  }
  const int64_t kv_dim = c.kv_dim;
  const float* kp = c.k_pages + static_cast<int64_t>(page) * c.block_size * kv_dim;
  const float* vp = c.v_pages + static_cast<int64_t>(page) * c.block_size * kv_dim;
  int8_t* kc = c.k_codes + static_cast<int64_t>(block) * c.block_size * kv_dim;
  int8_t* vc = c.v_codes + static_cast<int64_t>(block) * c.block_size * kv_dim;
  // Keys: per channel over the count tokens (QuantizeKeys, group_size = count).
  for (int64_t ch = threadIdx.x; ch < kv_dim; ch += blockDim.x) {
    float amax = 0.0f;
    for (int t = 0; t < count; ++t) amax = fmaxf(amax, fabsf(kp[t * kv_dim + ch]));
    uint16_t bits;
    const float scale = Fp16Scale(amax, &bits);
    c.k_scales[static_cast<int64_t>(block) * kv_dim + ch] = bits;
    for (int t = 0; t < count; ++t) kc[t * kv_dim + ch] = Int8Code(kp[t * kv_dim + ch], scale);
  }
  // Values: per token in groups of value_group channels (QuantizeValues).
  const int64_t g = c.value_group;
  const int64_t groups = (kv_dim + g - 1) / g;
  uint16_t* vs = c.v_scales + static_cast<int64_t>(block) * c.block_size * groups;
  for (int64_t item = threadIdx.x; item < count * groups; item += blockDim.x) {
    const int64_t t = item / groups, gi = item % groups;
    const int64_t c0 = gi * g, c1 = min(kv_dim, c0 + g);
    const float* row = vp + t * kv_dim;
    float amax = 0.0f;
    for (int64_t ch = c0; ch < c1; ++ch) amax = fmaxf(amax, fabsf(row[ch]));
    uint16_t bits;
    const float scale = Fp16Scale(amax, &bits);
    vs[t * groups + gi] = bits;
    for (int64_t ch = c0; ch < c1; ++ch) vc[t * kv_dim + ch] = Int8Code(row[ch], scale);
  }
}

absl::Status CheckQuantArgs(const void* in, const void* out, const void* scales,
                            int64_t num_tokens, int64_t channels, int32_t group_size) {
  if (num_tokens < 0 || channels < 0 || group_size < 1) {
    return absl::InvalidArgumentError("kv quant: bad size or group_size");
  }
  if (num_tokens > 0 && channels > 0 && (in == nullptr || out == nullptr || scales == nullptr)) {
    return absl::InvalidArgumentError("kv quant: null pointer");
  }
  return absl::OkStatus();
}

absl::Status Dequantize(const int8_t* codes, const float* scales, int64_t num_tokens,
                        int64_t channels, int32_t group_size, bool keys, float* out,
                        cudaStream_t stream) {
  if (absl::Status s = CheckQuantArgs(codes, out, scales, num_tokens, channels, group_size);
      !s.ok()) {
    return s;
  }
  const int64_t n = num_tokens * channels;
  if (n == 0) return absl::OkStatus();
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  DequantizeKernel<<<static_cast<unsigned>(blocks < 262144 ? blocks : 262144), kThreads, 0,
                     stream>>>(codes, scales, num_tokens, channels, group_size, keys, out);
  return LaunchStatus("DequantizeKernel");
}

}  // namespace

absl::Status StoreKv(const float* k, const float* v, const int32_t* slots, int64_t num_tokens,
                     int64_t num_kv_heads, int64_t block_size, int64_t head_dim, int64_t num_blocks,
                     void* k_cache, void* v_cache, core::DType cache_type, cudaStream_t stream) {
  if (!core::IsFloatDType(cache_type)) {
    return absl::InvalidArgumentError("StoreKv: float caches only (int8: QuantizeKeys/Values)");
  }
  if (num_tokens < 0 || num_kv_heads <= 0 || block_size <= 0 || head_dim <= 0 || num_blocks < 0) {
    return absl::InvalidArgumentError("StoreKv: bad size");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (k == nullptr || v == nullptr || slots == nullptr || k_cache == nullptr ||
      v_cache == nullptr) {
    return absl::InvalidArgumentError("StoreKv: null pointer");
  }
  StoreKvKernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(
      k, v, slots, num_kv_heads, block_size, head_dim, num_blocks * block_size, k_cache, v_cache,
      cache_type);
  return LaunchStatus("StoreKvKernel");
}

absl::Status StoreKvInt8(const float* k, const float* v, const int32_t* slots,
                         const int32_t* pages, int64_t num_tokens,
                         const kernels::SealEntry* seal, int64_t num_seal,
                         const Int8KvLayer& cache, cudaStream_t stream) {
  const Int8KvLayer& c = cache;
  if (num_tokens < 0 || num_seal < 0 || c.num_blocks < 0 || c.num_pages < 0 ||
      c.block_size <= 0 || c.kv_dim <= 0 || c.value_group < 1) {
    return absl::InvalidArgumentError("StoreKvInt8: bad size");
  }
  if ((num_tokens > 0 && (k == nullptr || v == nullptr || slots == nullptr || pages == nullptr ||
                          c.k_pages == nullptr || c.v_pages == nullptr)) ||
      (num_seal > 0 && (seal == nullptr || c.k_codes == nullptr || c.v_codes == nullptr ||
                        c.k_scales == nullptr || c.v_scales == nullptr || c.k_pages == nullptr ||
                        c.v_pages == nullptr))) {
    return absl::InvalidArgumentError("StoreKvInt8: null pointer");
  }
  if (num_tokens > 0) {
    StorePagesKernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(k, v, slots,
                                                                                 pages, c);
    if (absl::Status s = LaunchStatus("StorePagesKernel"); !s.ok()) return s;
  }
  if (num_seal > 0) {
    SealBlocksKernel<<<static_cast<unsigned>(num_seal), kThreads, 0, stream>>>(seal, c);
    if (absl::Status s = LaunchStatus("SealBlocksKernel"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status QuantizeKeys(const float* keys, int64_t num_tokens, int64_t channels,
                          int32_t group_size, bool fp16_scales, int8_t* codes, float* scales,
                          cudaStream_t stream) {
  if (absl::Status s = CheckQuantArgs(keys, codes, scales, num_tokens, channels, group_size);
      !s.ok()) {
    return s;
  }
  if (num_tokens == 0 || channels == 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(CeilDiv(num_tokens, group_size)),
                  static_cast<unsigned>(CeilDiv(channels, kThreads)));
  QuantizeKeysKernel<<<grid, kThreads, 0, stream>>>(keys, num_tokens, channels, group_size,
                                                    fp16_scales, codes, scales);
  return LaunchStatus("QuantizeKeysKernel");
}

absl::Status QuantizeValues(const float* values, int64_t num_tokens, int64_t channels,
                            int32_t group_size, bool fp16_scales, int8_t* codes, float* scales,
                            cudaStream_t stream) {
  if (absl::Status s = CheckQuantArgs(values, codes, scales, num_tokens, channels, group_size);
      !s.ok()) {
    return s;
  }
  if (num_tokens == 0 || channels == 0) return absl::OkStatus();
  const int64_t groups = (channels + group_size - 1) / group_size;
  const int64_t warps_per_block = kThreads / 32;
  const int64_t blocks = (num_tokens * groups + warps_per_block - 1) / warps_per_block;
  QuantizeValuesKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      values, num_tokens, channels, group_size, groups, fp16_scales, codes, scales);
  return LaunchStatus("QuantizeValuesKernel");
}

absl::Status DequantizeKeys(const int8_t* codes, const float* scales, int64_t num_tokens,
                            int64_t channels, int32_t group_size, float* keys,
                            cudaStream_t stream) {
  return Dequantize(codes, scales, num_tokens, channels, group_size, true, keys, stream);
}

absl::Status DequantizeValues(const int8_t* codes, const float* scales, int64_t num_tokens,
                              int64_t channels, int32_t group_size, float* values,
                              cudaStream_t stream) {
  return Dequantize(codes, scales, num_tokens, channels, group_size, false, values, stream);
}

}  // namespace kvfold::kernels::cuda
