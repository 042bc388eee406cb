// AVX-512 tiles of the batch-invariant matmul (matmul_tiles.h). Compiled with target
// attributes, so this file builds on any x86-64 compiler setting; the driver calls it
// only when cpuid reports AVX-512 (isa.h).
// GCC 12 reports the intentionally undefined pass-through operands inside the AVX-512
// intrinsic headers (_mm512_undefined_ps) as uninitialized; they are not.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/matmul_tiles.h"

namespace kvfold::kernels::cpu {
namespace {

#define KVFOLD_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

// 16 weights from w + off as floats; lanes outside `mask` are 0 and are not read.
template <DType D>
KVFOLD_AVX512 inline __m512 Load16(const void* w, int64_t off, __mmask16 mask) {
  if constexpr (D == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + off);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + off);
    if constexpr (D == DType::kF16) {
      return _mm512_cvtph_ps(h);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
}

template <DType D>
KVFOLD_AVX512 inline __m512 Load16(const void* w, int64_t off) {
  if constexpr (D == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + off);
  } else {
    return Load16<D>(w, off, 0xFFFF);
  }
}

// Fixed tree: 16 -> 8 (i + i+8) -> 4 -> 2 -> 1.
KVFOLD_AVX512 inline float Reduce16(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

template <int R, int C, DType D>
KVFOLD_AVX512 void Tile(const MatMulArgs& a, int64_t i0, int64_t j0) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t k = a.k;
  const int64_t k16 = k / 16 * 16;
  const float* x = a.x + i0 * k;
  const int64_t w0 = j0 * k;
  for (int64_t t = 0; t < k16; t += 16) {
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x + r * k + t);
    for (int c = 0; c < C; ++c) {
      const __m512 wv = Load16<D>(a.w, w0 + c * k + t);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (k16 < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - k16)) - 1);
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_maskz_loadu_ps(mask, x + r * k + k16);
    for (int c = 0; c < C; ++c) {
      const __m512 wv = Load16<D>(a.w, w0 + c * k + k16, mask);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = Reduce16(acc[r][c]);
      if (a.bias) s += a.bias[j0 + c];
      a.out[(i0 + r) * a.m + j0 + c] = s;
    }
  }
}

// Q8 weights (backend.h): per block of kQ8Block, blk = x[0:16] * w[0:16] + x[16:32] *
// w[16:32] (codes as floats), then acc += blk * scale; 16 lanes, reduced like F32.
template <int R, int C>
KVFOLD_AVX512 void TileQ8(const MatMulArgs& a, int64_t i0, int64_t j0) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t k = a.k;
  const int64_t blocks = (k + kQ8Block - 1) / kQ8Block;
  const size_t row_bytes = Q8RowBytes(k);
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + j0 * row_bytes;
  const int64_t codes_at = blocks * static_cast<int64_t>(sizeof(uint16_t));
  const float* x = a.x + i0 * k;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t t = b * kQ8Block;
    __m512 x0[R], x1[R];
    if (t + kQ8Block <= k) {
      for (int r = 0; r < R; ++r) {
        x0[r] = _mm512_loadu_ps(x + r * k + t);
        x1[r] = _mm512_loadu_ps(x + r * k + t + 16);
      }
    } else {
      const int64_t left = k - t;  // 1..31
      const __mmask16 m0 = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
      const __mmask16 m1 = static_cast<__mmask16>(left <= 16 ? 0 : (1u << (left - 16)) - 1);
      for (int r = 0; r < R; ++r) {
        x0[r] = _mm512_maskz_loadu_ps(m0, x + r * k + t);
        x1[r] = _mm512_maskz_loadu_ps(m1, x + r * k + t + 16);
      }
    }
    for (int c = 0; c < C; ++c) {
      const uint8_t* row = w + c * row_bytes;
      const int8_t* codes = reinterpret_cast<const int8_t*>(row + codes_at) + t;
      uint16_t h;
      __builtin_memcpy(&h, row + b * sizeof(uint16_t), sizeof(h));
      const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<int16_t>(h)));
      const __m512 w0 = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))));
      const __m512 w1 = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16))));
      for (int r = 0; r < R; ++r) {
        const __m512 blk = _mm512_fmadd_ps(x1[r], w1, _mm512_mul_ps(x0[r], w0));
        acc[r][c] = _mm512_fmadd_ps(blk, d, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = Reduce16(acc[r][c]);
      if (a.bias) s += a.bias[j0 + c];
      a.out[(i0 + r) * a.m + j0 + c] = s;
    }
  }
}

template <int R, DType D>
TileFn PickCols(int cols) {
  if constexpr (D == DType::kQ8) {
    switch (cols) {
      case 1: return TileQ8<R, 1>;
      case 2: return TileQ8<R, 2>;
      case 3: return TileQ8<R, 3>;
      case 4: return TileQ8<R, 4>;
      case 5: return TileQ8<R, 5>;
      case 6: return TileQ8<R, 6>;
      case 7: return TileQ8<R, 7>;
      default: return TileQ8<R, 8>;
    }
  }
  switch (cols) {
    case 1: return Tile<R, 1, D>;
    case 2: return Tile<R, 2, D>;
    case 3: return Tile<R, 3, D>;
    case 4: return Tile<R, 4, D>;
    case 5: return Tile<R, 5, D>;
    case 6: return Tile<R, 6, D>;
    case 7: return Tile<R, 7, D>;
    default: return Tile<R, 8, D>;
  }
}

template <DType D>
TileFn PickRows(int rows, int cols) {
  switch (rows) {
    case 1: return PickCols<1, D>(cols);
    case 2: return PickCols<2, D>(cols);
    case 3: return PickCols<3, D>(cols);
    default: return PickCols<4, D>(cols);
  }
}

}  // namespace

TileFn PickTileAvx512(DType w_dtype, int rows, int cols) {
  switch (w_dtype) {
    case DType::kF16:
      return PickRows<DType::kF16>(rows, cols);
    case DType::kBF16:
      return PickRows<DType::kBF16>(rows, cols);
    case DType::kQ8:
      return PickRows<DType::kQ8>(rows, cols);
    default:
      return PickRows<DType::kF32>(rows, cols);
  }
}

}  // namespace kvfold::kernels::cpu
