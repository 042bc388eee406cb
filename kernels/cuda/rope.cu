#include "kernels/cuda/rope.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvfold::kernels::cuda {
namespace {

// One block per token; one thread per (head, pair). Each thread reads both elements of its
// pair before writing them, so out may alias x.
__global__ void RopeKernel(const float* x,               // [num_tokens, num_heads, head_dim]
                           const int32_t* positions,     // [num_tokens]
                           const float* rope_table,      // [rope_rows, head_dim]
                           int32_t rope_rows, int32_t num_heads, int32_t head_dim,
                           float* out) {                 // [num_tokens, num_heads, head_dim]
  const int64_t token = blockIdx.x;
  const int half = head_dim / 2;
  const int pos = min(max(positions[token], 0), rope_rows - 1);
  const float* cs = rope_table + static_cast<int64_t>(pos) * head_dim;
  for (int idx = threadIdx.x; idx < num_heads * half; idx += blockDim.x) {
    const int head = idx / half, i = idx % half;
    const int64_t base = (token * num_heads + head) * head_dim;
    const float x0 = x[base + i], x1 = x[base + i + half];
    const float c = cs[i], s = cs[half + i];
    out[base + i] = x0 * c - x1 * s;
    out[base + i + half] = x1 * c + x0 * s;
  }
}

}  // namespace

absl::Status Rope(const float* x, const int32_t* positions, const float* rope_table,
                  int32_t rope_rows, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
                  float* out, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError("Rope: head_dim must be positive and even");
  }
  if (num_tokens < 0 || num_heads <= 0 || rope_rows <= 0) {
    return absl::InvalidArgumentError("Rope: bad size");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (x == nullptr || positions == nullptr || rope_table == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("Rope: null pointer");
  }
  const int pairs = num_heads * head_dim / 2;
  const int threads = pairs >= 512 ? 512 : ((pairs + 31) / 32) * 32;
  RopeKernel<<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
      x, positions, rope_table, rope_rows, num_heads, head_dim, out);
  return LaunchStatus("RopeKernel");
}

}  // namespace kvfold::kernels::cuda
