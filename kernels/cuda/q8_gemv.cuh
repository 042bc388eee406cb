// Q8 weights on the device (the CPU's format, kernels/backend.h kQ8 and
// docs/model-format.md "Q8 weights"): a [rows, cols] matrix stored row by row, each row
// ceil(cols / 32) fp16 scales followed by ceil(cols / 32) * 32 int8 codes (zero past
// cols); weight (r, c) = scale[c / 32] * code[c]. The kernels dequantize in registers
// (the weights are read once, as int8) and keep the activations F32, like the F32-weight
// Linear; the CPU backend's Q8 MatMul quantizes its activations to int8 as well, so the
// two agree within that rounding (docs/cuda.md "Q8 weights").
#ifndef KVFOLD_KERNELS_CUDA_Q8_GEMV_CUH_
#define KVFOLD_KERNELS_CUDA_Q8_GEMV_CUH_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace kvfold::kernels::cuda {

inline constexpr int64_t kQ8BlockSize = 32;
// Bytes of one stored row of `cols` weights.
inline constexpr size_t Q8RowBytesDevice(int64_t cols) {
  return static_cast<size_t>((cols + kQ8BlockSize - 1) / kQ8BlockSize) * (2 + kQ8BlockSize);
}

// y [num_tokens, out_features] = x [num_tokens, in_features] @ deq(w)^T + beta * y
// (F32; beta = 1 folds a residual add, 0 ignores y's old contents). w: out_features Q8
// rows of in_features. One warp per output column and group of up to 8 tokens, so a
// decode step streams each weight once; with in_features a multiple of 256 and 16-byte
// aligned w and x the codes are read 16 at a time. InvalidArgument for bad shapes or null
// pointers.
absl::Status Q8Linear(const float* x, int64_t num_tokens, int64_t in_features,
                      const uint8_t* w, int64_t out_features, float beta, float* y,
                      cudaStream_t stream);

// out [num_tokens, width] = deq(table[ids[i], :]) (F32). An id outside [0, table_rows)
// yields zeros (the engine validates ids on the host).
absl::Status Q8EmbeddingGather(const uint8_t* table, int64_t table_rows, int64_t width,
                               const int32_t* ids, int64_t num_tokens, float* out,
                               cudaStream_t stream);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_Q8_GEMV_CUH_
