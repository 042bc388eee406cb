#include "kernels/cuda/embedding.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvfold::kernels::cuda {
namespace {

__global__ void EmbeddingGatherKernel(const void* __restrict__ table,  // [table_rows, width]
                                      core::DType table_type, int64_t table_rows, int64_t width,
                                      const int32_t* __restrict__ ids,  // [num_tokens]
                                      float* __restrict__ out) {        // [num_tokens, width]
  const int64_t token = blockIdx.x;
  const int32_t id = ids[token];
  float* dst = out + token * width;
  const bool valid = id >= 0 && id < table_rows;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    dst[i] = valid ? LoadElem(table, static_cast<int64_t>(id) * width + i, table_type) : 0.0f;
  }
}

}  // namespace

absl::Status EmbeddingGather(const void* table, core::DType table_type, int64_t table_rows,
                             int64_t width, const int32_t* ids, int64_t num_tokens, float* out,
                             cudaStream_t stream) {
  if (!core::IsFloatDType(table_type)) return absl::InvalidArgumentError("EmbeddingGather: table type");
  if (num_tokens < 0 || width < 0 || table_rows < 0) {
    return absl::InvalidArgumentError("EmbeddingGather: negative size");
  }
  if (num_tokens == 0 || width == 0) return absl::OkStatus();
  if (table == nullptr || ids == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("EmbeddingGather: null pointer");
  }
  EmbeddingGatherKernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(
      table, table_type, table_rows, width, ids, out);
  return LaunchStatus("EmbeddingGatherKernel");
}

}  // namespace kvfold::kernels::cuda
