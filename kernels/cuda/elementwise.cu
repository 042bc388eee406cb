#include "kernels/cuda/elementwise.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvfold::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t n) {
  // Grid-stride loops below; cap the grid so huge n does not overflow gridDim.x.
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 * 4 ? blocks : 65536 * 4);
}

__host__ __device__ inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__host__ __device__ inline float HashUniform(uint64_t seed, uint64_t i) {
  const uint64_t h = SplitMix64(SplitMix64(seed) ^ i);
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

__global__ void SiluMulKernel(const float* gate,  // [num_tokens, gate_stride]
                              int64_t gate_stride,
                              const float* up,    // [num_tokens, up_stride]
                              int64_t up_stride, int64_t num_tokens, int64_t intermediate,
                              float* out) {       // [num_tokens, intermediate]
  const int64_t n = num_tokens * intermediate;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / intermediate, i = idx % intermediate;
    const float g = gate[r * gate_stride + i];
    out[idx] = g / (1.0f + expf(-g)) * up[r * up_stride + i];
  }
}

__global__ void AddKernel(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

__global__ void AddBiasKernel(float* y,  // [num_tokens, cols]
                              const void* bias, core::DType bias_type, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += LoadElem(bias, i % cols, bias_type);
  }
}

__global__ void CastKernel(const float* src, void* dst, core::DType dst_type, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    StoreElem(dst, i, dst_type, src[i]);
  }
}

__global__ void FillUniformKernel(void* dst, core::DType dst_type, int64_t n, uint64_t seed,
                                  float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // One rounding (fused multiply-add) on the device and in the host twin alike: the
    // compiler may not contract a separate multiply and add the same way on both.
    const float v = fmaf(hi - lo, HashUniform(seed, static_cast<uint64_t>(i)), lo);
    if (dst_type == core::DType::kI8) {
      static_cast<int8_t*>(dst)[i] = static_cast<int8_t>(fminf(fmaxf(rintf(v), -127.0f), 127.0f));
    } else {
      StoreElem(dst, i, dst_type, v);
    }
  }
}

}  // namespace

float UniformHash(uint64_t seed, uint64_t i) { return HashUniform(seed, i); }

absl::Status SiluMul(const float* gate, int64_t gate_stride, const float* up,
                     int64_t up_stride, int64_t num_tokens, int64_t intermediate, float* out,
                     cudaStream_t stream) {
  if (num_tokens < 0 || intermediate < 0 || gate_stride < intermediate ||
      up_stride < intermediate) {
    return absl::InvalidArgumentError("SiluMul: bad size or stride");
  }
  const int64_t n = num_tokens * intermediate;
  if (n == 0) return absl::OkStatus();
  if (gate == nullptr || up == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("SiluMul: null pointer");
  }
  SiluMulKernel<<<GridFor(n), kThreads, 0, stream>>>(gate, gate_stride, up, up_stride,
                                                      num_tokens, intermediate, out);
  return LaunchStatus("SiluMulKernel");
}

absl::Status Add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("Add: negative size");
  if (n == 0) return absl::OkStatus();
  if (a == nullptr || b == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("Add: null pointer");
  }
  AddKernel<<<GridFor(n), kThreads, 0, stream>>>(a, b, n, out);
  return LaunchStatus("AddKernel");
}

absl::Status AddBias(float* y, const void* bias, core::DType bias_type, int64_t num_tokens,
                     int64_t cols, cudaStream_t stream) {
  if (!core::IsFloatDType(bias_type)) return absl::InvalidArgumentError("AddBias: bias type");
  if (num_tokens < 0 || cols <= 0) return absl::InvalidArgumentError("AddBias: bad size");
  const int64_t n = num_tokens * cols;
  if (n == 0) return absl::OkStatus();
  if (y == nullptr || bias == nullptr) return absl::InvalidArgumentError("AddBias: null pointer");
  AddBiasKernel<<<GridFor(n), kThreads, 0, stream>>>(y, bias, bias_type, n, cols);
  return LaunchStatus("AddBiasKernel");
}

absl::Status Cast(const float* src, void* dst, core::DType dst_type, int64_t n,
                  cudaStream_t stream) {
  if (!core::IsFloatDType(dst_type)) return absl::InvalidArgumentError("Cast: destination type");
  if (n < 0) return absl::InvalidArgumentError("Cast: negative size");
  if (n == 0) return absl::OkStatus();
  if (src == nullptr || dst == nullptr) return absl::InvalidArgumentError("Cast: null pointer");
  CastKernel<<<GridFor(n), kThreads, 0, stream>>>(src, dst, dst_type, n);
  return LaunchStatus("CastKernel");
}

absl::Status FillUniform(void* dst, core::DType dst_type, int64_t n, uint64_t seed, float lo,
                         float hi, cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("FillUniform: negative size");
  if (n == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("FillUniform: null pointer");
  FillUniformKernel<<<GridFor(n), kThreads, 0, stream>>>(dst, dst_type, n, seed, lo, hi);
  return LaunchStatus("FillUniformKernel");
}

}  // namespace kvfold::kernels::cuda
