// Device helpers shared by the .cu files: typed loads/stores selected by a runtime
// core::DType (one compiled kernel per op instead of a template per dtype keeps nvcc time
// low; the switch is warp-uniform), warp/block reductions, and launcher argument checks.
// Included only by .cu files.
#ifndef KVFOLD_KERNELS_CUDA_COMMON_CUH_
#define KVFOLD_KERNELS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace kvfold::kernels::cuda {

// x[i] as float. kI8 returns the raw code (scales are applied by the caller).
__device__ __forceinline__ float LoadElem(const void* x, int64_t i, core::DType t) {
  switch (t) {
    case core::DType::kF32: return static_cast<const float*>(x)[i];
    case core::DType::kF16: return __half2float(static_cast<const __half*>(x)[i]);
    case core::DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
    default: return static_cast<float>(static_cast<const int8_t*>(x)[i]);
  }
}

// x[i] = v rounded to nearest even. Float types only (kI8 writes go through quantization).
__device__ __forceinline__ void StoreElem(void* x, int64_t i, core::DType t, float v) {
  switch (t) {
    case core::DType::kF32: static_cast<float*>(x)[i] = v; break;
    case core::DType::kF16: static_cast<__half*>(x)[i] = __float2half_rn(v); break;
    case core::DType::kBF16: static_cast<__nv_bfloat16*>(x)[i] = __float2bfloat16_rn(v); break;
    default: break;
  }
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `scratch` holds >= 32 floats; the function syncs before returning and may be called
// again with the same scratch.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Whether p may be read with 16-byte vector loads (a null pointer counts as aligned).
inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_COMMON_CUH_
