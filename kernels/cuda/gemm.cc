#include "kernels/cuda/gemm.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.cuh"

namespace kvfold::kernels::cuda {
namespace {

cudaDataType_t CudaType(core::DType t) {
  switch (t) {
    case core::DType::kF16: return CUDA_R_16F;
    case core::DType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

}  // namespace

size_t LinearScratchBytes(int64_t num_tokens, int64_t in_features, core::DType w_type) {
  if (w_type == core::DType::kF32) return 0;
  return static_cast<size_t>(num_tokens) * in_features * core::DTypeSize(w_type);
}

absl::Status Linear(cublasHandle_t handle, cudaStream_t stream, const LinearArgs& a) {
  if (!core::IsFloatDType(a.w_type)) return absl::InvalidArgumentError("Linear: weight type");
  if (a.num_tokens < 0 || a.in_features <= 0 || a.out_features <= 0 ||
      a.num_tokens > INT_MAX || a.in_features > INT_MAX || a.out_features > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: bad shape [", a.num_tokens, ", ",
                                                   a.in_features, "] x [", a.out_features,
                                                   ", ", a.in_features, "]^T"));
  }
  if (a.num_tokens == 0) return absl::OkStatus();
  if (a.x == nullptr || a.w == nullptr || a.y == nullptr) {
    return absl::InvalidArgumentError("Linear: null pointer");
  }
  const void* input = a.x;
  if (a.w_type != core::DType::kF32) {
    if (a.scratch == nullptr ||
        a.scratch_bytes < LinearScratchBytes(a.num_tokens, a.in_features, a.w_type)) {
      return absl::InvalidArgumentError("Linear: scratch too small for the input cast");
    }
    if (absl::Status s = Cast(a.x, a.scratch, a.w_type, a.num_tokens * a.in_features, stream);
        !s.ok()) {
      return s;
    }
    input = a.scratch;
  }
  KVFOLD_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream), "cublasSetStream");
  // Row-major y[n, m] = x[n, k] w[m, k]^T is column-major y^T[m, n] = w^T' ... i.e. with
  // column-major views w_cm = w^T [k, m] and x_cm = x^T [k, n]: y_cm = op_T(w_cm) * x_cm.
  const int m = static_cast<int>(a.out_features);
  const int n = static_cast<int>(a.num_tokens);
  const int k = static_cast<int>(a.in_features);
  const float alpha = 1.0f;
  const cudaDataType_t in_type = CudaType(a.w_type);
  KVFOLD_CUBLAS_RETURN_IF_ERROR(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a.w, in_type, k, input,
                   in_type, k, &a.beta, a.y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
  if (a.bias != nullptr) return AddBias(a.y, a.bias, a.bias_type, a.num_tokens, m, stream);
  return absl::OkStatus();
}

}  // namespace kvfold::kernels::cuda
