// Row-wise and elementwise CPU kernels shared by the reference and optimised paths (they
// are memory-bound and cheap; one implementation keeps both paths identical here).
#ifndef KVFOLD_KERNELS_CPU_ELEMENTWISE_H_
#define KVFOLD_KERNELS_CPU_ELEMENTWISE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace kvfold::kernels::cpu {

// out[i, :] = table[ids[i], :] as F32. OutOfRange for an id outside [0, num_rows).
absl::Status GatherRows(const void* table, DType dtype, int64_t num_rows, int64_t width,
                        const int32_t* ids, int64_t n, float* out);

void RmsNormRows(const float* x, const void* weight, DType w_dtype, float eps, int64_t n,
                 int64_t d, float* out);

// x [n, heads, head_dim]; OutOfRange for a position outside the table.
absl::Status RopeRows(const float* x, const int32_t* positions, const float* table,
                      int64_t table_rows, int64_t n, int64_t heads, int64_t head_dim,
                      float* out);

void SiluMulRows(const float* gate, const float* up, int64_t count, float* out);

// The index of the first largest element of x[0, n) that is not NaN; 0 when x[0] is NaN or
// n <= 0. The same index as a scan from the left that takes an element only when it is
// greater than the best so far.
int64_t ArgmaxRow(const float* x, int64_t n);

// sum of exp(x[i] - max) over [0, n), as a double (exp of a float argument: relative
// error ~1e-7 per term; 0 for terms below e^-87, for -inf and for NaN). Identical results
// on every ISA path. For log-softmax normalisers.
double SumExpRow(const float* x, int64_t n, float max);

// The sampler's integer weights of a row of logits (docs/engine.md, "Sampling"): per
// element w = exp((x[i] - max) * inv_t) (max: the row's largest logit, so w <= 1) and
// mass[i] = w * 2^40 rounded to the nearest integer, or 0 when w < min_w or w is NaN;
// keys[i] = w's bits where mass[i] > 0 (ordered as the weights are), else 0. Returns the
// sum of the masses. Identical results on every ISA path.
uint64_t SamplingMassRow(const float* x, int64_t n, float max, float inv_t, float min_w,
                         uint32_t* keys, uint64_t* mass);

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_ELEMENTWISE_H_
