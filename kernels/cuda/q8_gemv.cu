#include "kernels/cuda/q8_gemv.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvfold::kernels::cuda {
namespace {

constexpr int kTokensPerWarp = 8;
constexpr int kWarpsPerBlock = 4;

// Grid (ceil(out_features / 4), ceil(num_tokens / 8)); block 4 warps. Warp w of block b
// owns output column j = 4 b + w and tokens [8 y, 8 y + 8); a warp sum finishes each
// output.
// kWide (in_features a multiple of 256, so every row of 8n blocks is 272n bytes and its
// codes start 16-byte aligned after 16n bytes of scales; w and x aligned): lane l reads
// codes [16 c, 16 c + 16) for c = l, l + 32, ... with one 16-byte load (half a block, one
// scale) and the matching x as four float4, sums the sixteen code * x products and adds
// that times the scale to each token's partial sum.
// Otherwise lane l reads the code pairs 2 l + 64 s (16-bit loads: a row and its codes start
// at even offsets) and multiplies each dequantized pair into every token's partial sum.
template <bool kWide>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    Q8LinearKernel(const float* __restrict__ x,  // [num_tokens, k]
                   int64_t num_tokens, int64_t k,
                   const uint8_t* __restrict__ w,  // [m] Q8 rows of k
                   int64_t m, float beta,
                   float* __restrict__ y) {  // [num_tokens, m]
  const int lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokensPerWarp;
  if (j >= m) return;  // warp-uniform
  const int tokens =
      static_cast<int>(num_tokens - t0 < kTokensPerWarp ? num_tokens - t0 : kTokensPerWarp);
  const int64_t blocks = (k + kQ8BlockSize - 1) / kQ8BlockSize;
  const uint8_t* row = w + j * static_cast<int64_t>(Q8RowBytesDevice(k));
  const __half* scales = reinterpret_cast<const __half*>(row);
  const float* xt = x + t0 * k;
  float acc[kTokensPerWarp];
#pragma unroll
  for (int t = 0; t < kTokensPerWarp; ++t) acc[t] = 0.0f;
  if constexpr (kWide) {
    const uint4* codes = reinterpret_cast<const uint4*>(row + blocks * 2);
#pragma unroll 4
    for (int64_t c = lane; c < k / 16; c += 32) {
      const uint4 q = codes[c];
      const float d = __half2float(scales[c / 2]);
      const unsigned words[4] = {q.x, q.y, q.z, q.w};
      float code[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        code[i] = static_cast<float>(static_cast<int8_t>((words[i / 4] >> (8 * (i % 4))) & 0xffu));
      }
#pragma unroll
      for (int t = 0; t < kTokensPerWarp; ++t) {
        if (t < tokens) {
          const float4* xv = reinterpret_cast<const float4*>(xt + t * k + 16 * c);
          float part = 0.0f;
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            const float4 a = xv[v];
            part = fmaf(a.x, code[4 * v], part);
            part = fmaf(a.y, code[4 * v + 1], part);
            part = fmaf(a.z, code[4 * v + 2], part);
            part = fmaf(a.w, code[4 * v + 3], part);
          }
          acc[t] = fmaf(d, part, acc[t]);
        }
      }
    }
  } else {
    const char2* codes = reinterpret_cast<const char2*>(row + blocks * 2);
    for (int64_t e = 2 * lane; e < k; e += 64) {
      const char2 c = codes[e / 2];
      const float d = __half2float(scales[e / kQ8BlockSize]);
      const float w0 = d * static_cast<float>(c.x), w1 = d * static_cast<float>(c.y);
      const bool second = e + 1 < k;
#pragma unroll
      for (int t = 0; t < kTokensPerWarp; ++t) {
        if (t < tokens) {
          acc[t] = fmaf(xt[t * k + e], w0, acc[t]);
          if (second) acc[t] = fmaf(xt[t * k + e + 1], w1, acc[t]);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTokensPerWarp; ++t) {
    const float s = WarpSum(acc[t]);
    if (lane == 0 && t < tokens) {
      float* out = y + (t0 + t) * m + j;
      *out = beta == 0.0f ? s : s + beta * *out;
    }
  }
}

__global__ void Q8EmbeddingGatherKernel(const uint8_t* __restrict__ table, int64_t table_rows,
                                        int64_t width, const int32_t* __restrict__ ids,
                                        float* __restrict__ out) {  // [num_tokens, width]
  const int64_t token = blockIdx.x;
  const int32_t id = ids[token];
  float* dst = out + token * width;
  const bool valid = id >= 0 && id < table_rows;
  const int64_t blocks = (width + kQ8BlockSize - 1) / kQ8BlockSize;
  const uint8_t* row = table + (valid ? id : 0) * static_cast<int64_t>(Q8RowBytesDevice(width));
  const __half* scales = reinterpret_cast<const __half*>(row);
  const int8_t* codes = reinterpret_cast<const int8_t*>(row + blocks * 2);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    dst[i] = valid ? __half2float(scales[i / kQ8BlockSize]) * static_cast<float>(codes[i]) : 0.0f;
  }
}

}  // namespace

absl::Status Q8Linear(const float* x, int64_t num_tokens, int64_t in_features,
                      const uint8_t* w, int64_t out_features, float beta, float* y,
                      cudaStream_t stream) {
  if (num_tokens < 0 || in_features <= 0 || out_features <= 0 ||
      out_features > int64_t{kWarpsPerBlock} * 0x7fffffff ||
      num_tokens > int64_t{kTokensPerWarp} * 65535) {
    return absl::InvalidArgumentError("Q8Linear: bad shape");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (x == nullptr || w == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("Q8Linear: null pointer");
  }
  const dim3 grid(CeilDiv(out_features, kWarpsPerBlock), CeilDiv(num_tokens, kTokensPerWarp));
  const bool wide = in_features % (8 * kQ8BlockSize) == 0 && Aligned16(w) && Aligned16(x);
  const auto kernel = wide ? Q8LinearKernel<true> : Q8LinearKernel<false>;
  kernel<<<grid, kWarpsPerBlock * 32, 0, stream>>>(x, num_tokens, in_features, w, out_features,
                                                   beta, y);
  return LaunchStatus("Q8LinearKernel");
}

absl::Status Q8EmbeddingGather(const uint8_t* table, int64_t table_rows, int64_t width,
                               const int32_t* ids, int64_t num_tokens, float* out,
                               cudaStream_t stream) {
  if (num_tokens < 0 || width <= 0 || table_rows < 0) {
    return absl::InvalidArgumentError("Q8EmbeddingGather: bad shape");
  }
  if (num_tokens == 0) return absl::OkStatus();
  if (table == nullptr || ids == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("Q8EmbeddingGather: null pointer");
  }
  Q8EmbeddingGatherKernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(
      table, table_rows, width, ids, out);
  return LaunchStatus("Q8EmbeddingGatherKernel");
}

}  // namespace kvfold::kernels::cuda
