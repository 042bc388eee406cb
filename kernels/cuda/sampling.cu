#include "kernels/cuda/sampling.cuh"

#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvfold::kernels::cuda {
namespace {

constexpr int kThreads = 1024;

// Order-preserving map float -> uint32 (NaN -> 0, below every number).
__device__ __forceinline__ uint32_t OrderedKey(float x) {
  if (isnan(x)) return 0u;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block argmax of one row, lowest index among equal maxima; every thread gets the result.
__device__ int32_t RowArgmax(const float* x, int32_t vocab_size) {
  __shared__ float best_v[32];
  __shared__ int32_t best_i[32];
  float v = -INFINITY;
  int32_t idx = INT_MAX;
  for (int32_t i = threadIdx.x; i < vocab_size; i += blockDim.x) {
    const float xi = x[i];
    if (!isnan(xi) && (xi > v || idx == INT_MAX)) {  // strided: first hit has lowest index
      v = xi;
      idx = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (oi != INT_MAX && (idx == INT_MAX || ov > v || (ov == v && oi < idx))) {
      v = ov;
      idx = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    best_v[warp] = v;
    best_i[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    const int num_warps = blockDim.x >> 5;
    v = lane < num_warps ? best_v[lane] : -INFINITY;
    idx = lane < num_warps ? best_i[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int32_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
      if (oi != INT_MAX && (idx == INT_MAX || ov > v || (ov == v && oi < idx))) {
        v = ov;
        idx = oi;
      }
    }
    if (lane == 0) best_i[0] = idx == INT_MAX ? 0 : idx;
  }
  __syncthreads();
  return best_i[0];
}

__global__ void __launch_bounds__(kThreads)
    ArgmaxKernel(const float* logits,  // [num_rows, vocab_size]
                 int32_t vocab_size, int32_t* tokens) {
  const int32_t t = RowArgmax(logits + static_cast<int64_t>(blockIdx.x) * vocab_size, vocab_size);
  if (threadIdx.x == 0) tokens[blockIdx.x] = t;
}

// One block per row. Thresholds are found by bisection on the ordered key space (32
// passes over the row each), so no sort and no vocab-sized scratch are needed.
__global__ void __launch_bounds__(kThreads)
    SampleKernel(const float* logits,  // [num_rows, vocab_size]
                 int32_t vocab_size, const SamplingParams* params, int32_t* tokens) {
  __shared__ float scratch[32];
  __shared__ float prefix_s[kThreads];
  __shared__ int32_t pick_s, last_kept_s;
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * vocab_size;
  const SamplingParams sp = params[blockIdx.x];
  if (sp.temperature <= 0.0f || sp.top_k == 1) {
    const int32_t t = RowArgmax(x, vocab_size);
    if (threadIdx.x == 0) tokens[blockIdx.x] = t;
    return;
  }
  float local_max = -INFINITY;
  for (int32_t i = threadIdx.x; i < vocab_size; i += blockDim.x) {
    if (!isnan(x[i])) local_max = fmaxf(local_max, x[i]);
  }
  const float row_max = BlockMax(local_max, scratch);
  const float inv_t = 1.0f / sp.temperature;
  auto weight = [&](int32_t i) { return isnan(x[i]) ? 0.0f : expf((x[i] - row_max) * inv_t); };

  // Top-k: the largest key t with count(key >= t) >= k.
  uint32_t threshold = 0;
  if (sp.top_k > 0 && sp.top_k < vocab_size) {
    uint64_t lo = 0, hi = 1ull << 32;
    while (hi - lo > 1) {
      const uint64_t mid = (lo + hi) / 2;
      float count = 0.0f;
      for (int32_t i = threadIdx.x; i < vocab_size; i += blockDim.x) {
        count += OrderedKey(x[i]) >= mid ? 1.0f : 0.0f;
      }
      if (BlockSum(count, scratch) >= static_cast<float>(sp.top_k)) lo = mid; else hi = mid;
    }
    threshold = static_cast<uint32_t>(lo);
  }
  auto mass_at = [&](uint64_t t) {
    float m = 0.0f;
    for (int32_t i = threadIdx.x; i < vocab_size; i += blockDim.x) {
      if (OrderedKey(x[i]) >= t) m += weight(i);
    }
    return BlockSum(m, scratch);
  };
  // Top-p: the largest key t >= threshold whose mass(key >= t) still reaches top_p * mass.
  if (sp.top_p > 0.0f && sp.top_p < 1.0f) {
    const float target = sp.top_p * mass_at(threshold);
    uint64_t lo = threshold, hi = 1ull << 32;
    while (hi - lo > 1) {
      const uint64_t mid = (lo + hi) / 2;
      if (mass_at(mid) >= target) lo = mid; else hi = mid;
    }
    threshold = static_cast<uint32_t>(lo);
  }

  // Index-order pick: thread t owns the contiguous chunk [t * chunk, (t + 1) * chunk).
  const int32_t chunk = (vocab_size + kThreads - 1) / kThreads;
  const int32_t c0 = min(vocab_size, static_cast<int32_t>(threadIdx.x) * chunk);
  const int32_t c1 = min(vocab_size, c0 + chunk);
  float local = 0.0f;
  int32_t last_kept = -1;
  for (int32_t i = c0; i < c1; ++i) {
    if (OrderedKey(x[i]) >= threshold) {
      local += weight(i);
      last_kept = i;
    }
  }
  if (threadIdx.x == 0) {
    pick_s = -1;
    last_kept_s = -1;
  }
  prefix_s[threadIdx.x] = local;
  __syncthreads();
  // Inclusive scan of the per-thread sums (Hillis-Steele; 10 steps for 1024 threads).
  for (int offset = 1; offset < kThreads; offset <<= 1) {
    const float add = threadIdx.x >= offset ? prefix_s[threadIdx.x - offset] : 0.0f;
    __syncthreads();
    prefix_s[threadIdx.x] += add;
    __syncthreads();
  }
  const float total = prefix_s[kThreads - 1];
  const float target = SamplingUniform(sp.seed, sp.step) * total;
  const float before = prefix_s[threadIdx.x] - local;
  if (last_kept >= 0) atomicMax(&last_kept_s, last_kept);
  if (local > 0.0f && before <= target && target < before + local) {
    float running = before;
    for (int32_t i = c0; i < c1; ++i) {
      if (OrderedKey(x[i]) >= threshold) {
        running += weight(i);
        if (running > target) {
          atomicMax(&pick_s, i);  // one thread owns the target; max only breaks float ties
          break;
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = pick_s >= 0 ? pick_s : max(last_kept_s, 0);
  }
}

}  // namespace

absl::Status Argmax(const float* logits, int32_t num_rows, int32_t vocab_size, int32_t* tokens,
                    cudaStream_t stream) {
  if (num_rows < 0 || vocab_size <= 0) return absl::InvalidArgumentError("Argmax: bad size");
  if (num_rows == 0) return absl::OkStatus();
  if (logits == nullptr || tokens == nullptr) return absl::InvalidArgumentError("Argmax: null");
  ArgmaxKernel<<<num_rows, kThreads, 0, stream>>>(logits, vocab_size, tokens);
  return LaunchStatus("ArgmaxKernel");
}

absl::Status Sample(const float* logits, int32_t num_rows, int32_t vocab_size,
                    const SamplingParams* params, int32_t* tokens, cudaStream_t stream) {
  if (num_rows < 0 || vocab_size <= 0) return absl::InvalidArgumentError("Sample: bad size");
  if (num_rows == 0) return absl::OkStatus();
  if (logits == nullptr || params == nullptr || tokens == nullptr) {
    return absl::InvalidArgumentError("Sample: null pointer");
  }
  SampleKernel<<<num_rows, kThreads, 0, stream>>>(logits, vocab_size, params, tokens);
  return LaunchStatus("SampleKernel");
}

}  // namespace kvfold::kernels::cuda
