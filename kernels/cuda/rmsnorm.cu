#include "kernels/cuda/rmsnorm.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvfold::kernels::cuda {
namespace {

// One block per row; the row is read twice (sum of squares, then scale), both times from
// L1/L2 for any realistic hidden_size.
__global__ void RmsNormKernel(const float* x,       // [num_tokens, hidden_size]
                              const void* weight,   // [hidden_size]
                              core::DType weight_type, float eps, int64_t hidden_size,
                              float* out) {         // [num_tokens, hidden_size]
  __shared__ float scratch[32];
  const float* row = x + blockIdx.x * hidden_size;
  float* dst = out + blockIdx.x * hidden_size;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < hidden_size; i += blockDim.x) sum_sq += row[i] * row[i];
  sum_sq = BlockSum(sum_sq, scratch);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(hidden_size) + eps);
  for (int64_t i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    dst[i] = row[i] * inv_rms * LoadElem(weight, i, weight_type);
  }
}

}  // namespace

absl::Status RmsNorm(const float* x, const void* weight, core::DType weight_type, float eps,
                     int64_t num_tokens, int64_t hidden_size, float* out, cudaStream_t stream) {
  if (!core::IsFloatDType(weight_type)) return absl::InvalidArgumentError("RmsNorm: weight type");
  if (num_tokens < 0 || hidden_size <= 0) {
    return absl::InvalidArgumentError("RmsNorm: bad size");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (x == nullptr || weight == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("RmsNorm: null pointer");
  }
  const int threads = hidden_size >= 4096 ? 1024 : (hidden_size >= 1024 ? 512 : 128);
  RmsNormKernel<<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
      x, weight, weight_type, eps, hidden_size, out);
  return LaunchStatus("RmsNormKernel");
}

}  // namespace kvfold::kernels::cuda
