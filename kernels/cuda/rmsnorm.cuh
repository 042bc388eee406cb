// RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight, per row, statistics in fp32.
#ifndef KVFOLD_KERNELS_CUDA_RMSNORM_CUH_
#define KVFOLD_KERNELS_CUDA_RMSNORM_CUH_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace kvfold::kernels::cuda {

// x, out [num_tokens, hidden_size] F32 (may alias); weight [hidden_size] float type.
absl::Status RmsNorm(const float* x, const void* weight, core::DType weight_type, float eps,
                     int64_t num_tokens, int64_t hidden_size, float* out, cudaStream_t stream);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_RMSNORM_CUH_
