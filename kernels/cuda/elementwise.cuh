// Small elementwise ops of the decode step, grouped in one .cu to keep nvcc invocations
// few: SiLU * mul, residual add, bias add, fp32 -> weight-dtype cast (the GEMM input), and
// a deterministic random fill (benchmarks and tests build models on the device with it).
#ifndef KVFOLD_KERNELS_CUDA_ELEMENTWISE_CUH_
#define KVFOLD_KERNELS_CUDA_ELEMENTWISE_CUH_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace kvfold::kernels::cuda {

// out[r, i] = silu(gate[r * gate_stride + i]) * up[r * up_stride + i], silu(x) = x / (1 + e^-x).
// gate, up: rows of `num_tokens` with the given strides (a fused gate|up projection output
// [num_tokens, 2 * intermediate] uses gate = base, up = base + intermediate, strides
// 2 * intermediate). out [num_tokens, intermediate] F32.
absl::Status SiluMul(const float* gate, int64_t gate_stride, const float* up,
                     int64_t up_stride, int64_t num_tokens, int64_t intermediate, float* out,
                     cudaStream_t stream);

// out = a + b, n elements; out may alias a or b.
absl::Status Add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream);

// y[r, c] += bias[c]. y [num_tokens, cols] F32; bias [cols] float type.
absl::Status AddBias(float* y, const void* bias, core::DType bias_type, int64_t num_tokens,
                     int64_t cols, cudaStream_t stream);

// dst[i] = src[i] rounded to dst_type (nearest even). n elements.
absl::Status Cast(const float* src, void* dst, core::DType dst_type, int64_t n,
                  cudaStream_t stream);

// dst[i] = fma(hi - lo, U(seed, i), lo) (one rounding), U a counter-based hash uniform in
// [0, 1); the same (seed, i) gives the same value on every device. kI8: rint of the value
// clamped to [-127, 127] (random KV codes for benchmarks).
absl::Status FillUniform(void* dst, core::DType dst_type, int64_t n, uint64_t seed, float lo,
                         float hi, cudaStream_t stream);

// Host twin of FillUniform's value for element i (tests rebuild device data on the CPU).
float UniformHash(uint64_t seed, uint64_t i);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_ELEMENTWISE_CUH_
