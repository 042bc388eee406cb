// Per-row int8 quantization of a Q8 MatMul's activations (cpu_ops.h Q8Activations).
// The portable, AVX2 and AVX-512 versions use the same float operations in the same
// order per element (max, one division each for the scale and its inverse, one product,
// a clamp with the vector min/max NaN rule, round to nearest even), so they write
// identical codes and scales; the matmul paths differ only in how they sum the products.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace kvfold::kernels::cpu {
namespace {

// The vector instructions' rules: max(a, b) = a > b ? a : b (b when either is NaN).
inline float MaxPs(float a, float b) { return a > b ? a : b; }
inline float MinPs(float a, float b) { return a < b ? a : b; }

// One block of `len` (1..kQ8Block) floats into kQ8Block codes (zeros past len).
void QuantizeBlockPortable(const float* x, int64_t len, int8_t* codes, float* scale) {
  float amax = 0.0f;
  for (int64_t t = 0; t < len; ++t) amax = MaxPs(std::fabs(x[t]), amax);
  const float d = amax / 127.0f;
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  for (int64_t t = 0; t < kQ8Block; ++t) {
    const float q = t < len ? MinPs(MaxPs(x[t] * id, -127.0f), 127.0f) : 0.0f;
    codes[t] = static_cast<int8_t>(std::nearbyint(q));
  }
  *scale = d;
}

#define KVFOLD_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVFOLD_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define KVFOLD_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

KVFOLD_AVX2 void QuantizeBlockAvx2(const float* x, int64_t len, int8_t* codes, float* scale) {
  if (len < kQ8Block) return QuantizeBlockPortable(x, len, codes, scale);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float d = _mm_cvtss_f32(m4) / 127.0f;
  const __m256 id = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[i], id), lo), hi));
  }
  // Pack 32 int32 to int8 (values already in [-127, 127]); packs interleave 128-bit lanes.
  const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i b = _mm256_packs_epi16(w01, w23);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), _mm256_permutevar8x32_epi32(b, order));
  *scale = d;
}

// Lane i of the result: the largest lane of a[i] (a[0..15]). Four rounds, each taking the
// max of two vectors' shuffles (half the lanes of every input each round); the lanes end
// up in the order [0 2 1 3 | 8 10 9 11 | 4 6 5 7 | 12 14 13 15], which one permute puts
// back. Max is exact and the inputs are NaN-free, so the grouping does not matter.
KVFOLD_AVX512 inline __m512 LaneMaxima(const __m512* a) {
  __m512 b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i) {
    b[i] = _mm512_max_ps(_mm512_shuffle_f32x4(a[i], a[i + 8], 0x44), _mm512_shuffle_f32x4(a[i], a[i + 8], 0xEE));
  }
  for (int i = 0; i < 4; ++i) {
    c[i] = _mm512_max_ps(_mm512_shuffle_f32x4(b[i], b[i + 4], 0x88), _mm512_shuffle_f32x4(b[i], b[i + 4], 0xDD));
  }
  for (int i = 0; i < 2; ++i) {
    d[i] = _mm512_max_ps(_mm512_shuffle_ps(c[i], c[i + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(c[i], c[i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 e = _mm512_max_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
  return _mm512_permutexvar_ps(order, e);
}

// The whole blocks [0, blocks) of one row with the portable quantizer's operations, 16
// blocks at a time: every block's max |x| (NaN-free after the max with 0, as the portable
// max drops NaN, so the order of the reduction does not matter; LaneMaxima reduces the 16
// blocks together), then the 16 scales d = amax / 127 and their inverses in one vector
// division each (IEEE division: the bits of the scalar one), then the codes. Was one call
// per block with a reduction and two scalar divisions each: ~50 % of a 16-row, 768-column
// MatMul call in cache.
KVFOLD_AVX512 void QuantizeRowAvx512(const float* x, int64_t blocks, int8_t* codes, float* scales) {
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const int count = static_cast<int>(std::min<int64_t>(16, blocks - b0));
    __m512 m[16];
    for (int i = 0; i < 16; ++i) {
      const float* xb = x + (b0 + i) * kQ8Block;
      m[i] = i < count ? _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 16)),
                                       _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb)), _mm512_setzero_ps()))
                       : _mm512_setzero_ps();
    }
    const __m512 d = _mm512_div_ps(LaneMaxima(m), _mm512_set1_ps(127.0f));
    const __mmask16 positive = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_GT_OQ);
    alignas(64) float inv[16];
    _mm512_store_ps(inv, _mm512_maskz_div_ps(positive, _mm512_set1_ps(1.0f), d));
    _mm512_mask_storeu_ps(scales + b0, static_cast<__mmask16>((1u << count) - 1), d);
    for (int i = 0; i < count; ++i) {
      const float* xb = x + (b0 + i) * kQ8Block;
      int8_t* cb = codes + (b0 + i) * kQ8Block;
      const __m512 id = _mm512_set1_ps(inv[i]);
      const __m512i q0 = _mm512_cvtps_epi32(
          _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(xb), id), lo), hi));
      const __m512i q1 = _mm512_cvtps_epi32(
          _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), id), lo), hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(cb), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(cb + 16), _mm512_cvtsepi32_epi8(q1));
    }
  }
}

// offset[l] = -128 * (codes[4l] + ... + codes[4l + 3]) over one row's padded codes: the
// term that turns the VNNI product (w + 128) * x into w * x (matmul_avx512.cc).
KVFOLD_VNNI void OffsetsVnni(const int8_t* codes, int64_t padded_k, int32_t* offset) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t t = 0; t < padded_k; t += 64) {
    const __m512i x = _mm512_loadu_si512(codes + t);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, x);
    _mm512_storeu_si512(offset + t / 4, _mm512_sub_epi32(_mm512_setzero_si512(), s));
  }
}

// offset[b] = -128 * (the sum of block b's codes), the same term per block
// (matmul_q8_panels.cc). Exact integers: any order.
void BlockOffsets(const int8_t* codes, int64_t padded_k, int32_t* offset) {
  for (int64_t b = 0; b < padded_k / kQ8Block; ++b) {
    int32_t sum = 0;
    for (int64_t t = b * kQ8Block; t < (b + 1) * kQ8Block; ++t) sum += codes[t];
    offset[b] = -128 * sum;
  }
}

using BlockFn = void (*)(const float*, int64_t, int8_t*, float*);

}  // namespace

void QuantizeActivationsQ8(ThreadPool* pool, const float* x, int64_t n, int64_t k,
                           Q8Offsets offsets, Q8Activations& xq) {
  const int64_t padded_k = (k + 2 * kQ8Block - 1) / (2 * kQ8Block) * (2 * kQ8Block);
  const int64_t padded_blocks = padded_k / kQ8Block;
  xq.padded_k = padded_k;
  const auto grow = [](auto& v, size_t size) {
    if (v.size() < size) v.resize(size);
  };
  grow(xq.codes, static_cast<size_t>(n * padded_k));
  grow(xq.scales, static_cast<size_t>(n * padded_blocks));
  if (offsets == Q8Offsets::kLanes) grow(xq.offset, static_cast<size_t>(n * padded_k / 4));
  if (offsets == Q8Offsets::kBlocks) grow(xq.block_offset, static_cast<size_t>(n * padded_blocks));
  const Isa isa = ActiveIsa();
  // AVX-512 takes a row's whole blocks in QuantizeRowAvx512; what is left there (a partial
  // block) is the portable code, as on the AVX2 path.
  const BlockFn block = isa == Isa::kAvx2 ? QuantizeBlockAvx2 : QuantizeBlockPortable;
  auto rows = [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      int8_t* codes = xq.codes.data() + r * padded_k;
      float* scales = xq.scales.data() + r * padded_blocks;
      int64_t b = 0;
      if (isa == Isa::kAvx512) {  // whole blocks in one pass (same bits as the block kernel)
        b = k / kQ8Block;
        QuantizeRowAvx512(x + r * k, b, codes, scales);
      }
      for (; b < padded_blocks; ++b) {
        const int64_t t = b * kQ8Block;
        if (t >= k) {
          std::memset(codes + t, 0, kQ8Block);
          scales[b] = 0.0f;
        } else {
          block(x + r * k + t, std::min(kQ8Block, k - t), codes + t, scales + b);
        }
      }
      if (offsets == Q8Offsets::kLanes) {
        OffsetsVnni(codes, padded_k, xq.offset.data() + r * padded_k / 4);
      }
      if (offsets == Q8Offsets::kBlocks) {
        BlockOffsets(codes, padded_k, xq.block_offset.data() + r * padded_blocks);
      }
    }
  };
  if (pool == nullptr || n * k < (1 << 15)) {
    rows(0, n, 0);
  } else {
    pool->ParallelFor(n, 1, rows);
  }
}

}  // namespace kvfold::kernels::cpu
