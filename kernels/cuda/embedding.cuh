// Embedding gather: out[i, :] = F32(table[ids[i], :]).
#ifndef KVFOLD_KERNELS_CUDA_EMBEDDING_CUH_
#define KVFOLD_KERNELS_CUDA_EMBEDDING_CUH_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace kvfold::kernels::cuda {

// table [table_rows, width] (float type), ids [num_tokens] I32, out [num_tokens, width] F32.
// An id outside [0, table_rows) yields a row of zeros (the engine validates ids on the host
// before they reach the device; the kernel never reads out of bounds).
// InvalidArgument for a non-float table type or non-positive sizes with null pointers.
absl::Status EmbeddingGather(const void* table, core::DType table_type, int64_t table_rows,
                             int64_t width, const int32_t* ids, int64_t num_tokens, float* out,
                             cudaStream_t stream);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_EMBEDDING_CUH_
