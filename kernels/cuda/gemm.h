// Projections with cuBLAS: y = x @ w^T (+ bias) (+ beta * y), the PyTorch Linear
// convention, row-major. Activations stay F32 on the device; for F16/BF16 weights the
// input is first cast to the weight type (into caller-provided scratch) and cublasGemmEx
// runs with F16/BF16 inputs, F32 output and CUBLAS_COMPUTE_32F accumulation. F32 weights
// use CUBLAS_COMPUTE_32F as well (no TF32: parity with the CPU matters more than speed
// there, and production weights are BF16).
#ifndef KVFOLD_KERNELS_CUDA_GEMM_H_
#define KVFOLD_KERNELS_CUDA_GEMM_H_

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace kvfold::kernels::cuda {

struct LinearArgs {
  const float* x = nullptr;     // [num_tokens, in_features] F32
  int64_t num_tokens = 0;
  int64_t in_features = 0;
  const void* w = nullptr;      // [out_features, in_features], w_type
  core::DType w_type = core::DType::kF32;
  int64_t out_features = 0;
  const void* bias = nullptr;   // [out_features] or null
  core::DType bias_type = core::DType::kF32;
  float* y = nullptr;           // [num_tokens, out_features] F32
  // y = x w^T + beta * y. 1 folds a residual add into the projection. Default: 0.
  float beta = 0.0f;
  // Scratch for the cast input when w_type is F16/BF16: LinearScratchBytes() bytes.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

size_t LinearScratchBytes(int64_t num_tokens, int64_t in_features, core::DType w_type);

// Binds `handle` to `stream` and enqueues the projection. InvalidArgument for bad shapes,
// missing scratch or sizes beyond cuBLAS' int range; cuBLAS failures via CublasStatus.
absl::Status Linear(cublasHandle_t handle, cudaStream_t stream, const LinearArgs& args);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_GEMM_H_
