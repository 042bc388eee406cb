// Building blocks of the CPU attention kernels (attention.cc, attention_int8.cc): key
// location in the paged cache, and the AVX2 / portable dot, axpy and softmax. Each is
// deterministic: the same inputs give the same bits wherever a row is computed.
#ifndef KVFOLD_KERNELS_CPU_ATTENTION_SIMD_H_
#define KVFOLD_KERNELS_CPU_ATTENTION_SIMD_H_

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/backend.h"

namespace kvfold::kernels::cpu::attention_simd {

// Locates the visible entries of one attention row (AttnRow fields) in the paged cache.
template <typename Args>
struct KeyRefT {
  const Args& a;
  const int32_t* row;
  int kv_dim;

  int num_keys() const {
    return row[kAttnPrefixVisible] + (row[kAttnMainHi] - row[kAttnMainLo]);
  }
  // Offset (in floats) of key/value entry `idx` (0-based over prefix then main) of head 0,
  // and its position.
  int64_t Locate(int idx, int* pos) const {
    const int bs = a.shape.block_size;
    int64_t slot;
    int32_t block;
    const int prefix_visible = row[kAttnPrefixVisible];
    if (idx < prefix_visible) {
      block = a.block_tables[row[kAttnPrefixTable] + idx / bs];
      slot = idx % bs;
      *pos = row[kAttnPrefixPosBase] + idx * row[kAttnPrefixPosStride];
    } else {
      const int j = row[kAttnMainLo] + (idx - prefix_visible);
      const int64_t s = static_cast<int64_t>(row[kAttnMainFront]) + j;
      block = a.block_tables[row[kAttnMainTable] + s / bs];
      slot = s % bs;
      *pos = row[kAttnMainPosLo] + (j - row[kAttnMainLo]);
    }
    return (static_cast<int64_t>(block) * bs + slot) * kv_dim;
  }
};


__attribute__((target("avx2,fma"))) inline float DotAvx2(const float* x, const float* y, int n) {
  __m256 acc = _mm256_setzero_ps();
  int d = 0;
  for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  for (; d < n; ++d) s = __builtin_fmaf(x[d], y[d], s);
  return s;
}

inline float DotPortable(const float* x, const float* y, int n) {
  float lanes[8] = {};
  int d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) lanes[l] = __builtin_fmaf(x[d + l], y[d + l], lanes[l]);
  float s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  for (; d < n; ++d) s = __builtin_fmaf(x[d], y[d], s);
  return s;
}

__attribute__((target("avx2,fma"))) inline void AxpyAvx2(float p, const float* v, float* out, int n) {
  const __m256 pv = _mm256_set1_ps(p);
  int d = 0;
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(out + d)));
  for (; d < n; ++d) out[d] = __builtin_fmaf(p, v[d], out[d]);
}

inline void AxpyPortable(float p, const float* v, float* out, int n) {
  for (int d = 0; d < n; ++d) out[d] = __builtin_fmaf(p, v[d], out[d]);
}

// exp for 8 lanes (Cephes expf polynomial, ~2 ulp). Deterministic: the same inputs give
// the same bits wherever a row is computed.
__attribute__((target("avx2,fma"))) inline __m256 Exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// s[i] <- softmax(s)[i] over n scores, AVX2.
__attribute__((target("avx2,fma"))) inline void SoftmaxAvx2(float* s, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, s[i]);
  const __m256 m = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), m));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    alignas(32) float tail[8];
    for (int l = 0; l < 8; ++l) tail[l] = i + l < n ? s[i + l] : -std::numeric_limits<float>::infinity();
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_load_ps(tail), m));
    _mm256_store_ps(tail, e);
    acc = _mm256_add_ps(acc, e);
    for (int l = 0; i + l < n; ++l) s[i + l] = tail[l];
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  const float sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), inv));
  for (; i < n; ++i) s[i] *= 1.0f / sum;
}

inline void SoftmaxPortable(float* s, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, s[i]);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - mx));
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) s[i] *= inv;
}


}  // namespace kvfold::kernels::cpu::attention_simd

#endif  // KVFOLD_KERNELS_CPU_ATTENTION_SIMD_H_
