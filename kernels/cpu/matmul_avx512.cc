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
      if constexpr (R > 1 && D == DType::kF32) {
        // Batches re-read a column block's weights from L2 once per row tile; the loads
        // of six rows at once stalled there (perf), so ask for four lines ahead.
        _mm_prefetch(reinterpret_cast<const char*>(static_cast<const float*>(a.w) + w0 + c * k + t) + 256,
                     _MM_HINT_T0);
      }
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

#define KVFOLD_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

// Q8 weights on int8 activations, two blocks (64 codes) per step. vpdpbusd multiplies
// unsigned by signed bytes, so the weights are biased to w + 128 (unsigned) and the
// activations' offset (-128 * their 4-code sums, Q8Activations::offset) starts each
// integer lane: lane l = x[4l..4l+3] . w[4l..4l+3] exactly. Lanes 0-7 belong to the
// even block, 8-15 to the odd one; acc = fma(float(lane), x_scale * w_scale, acc).
// An odd last block reads its weights masked (zeros: their product with the zero
// activation padding is 0).
template <int R, int C>
KVFOLD_VNNI void TileQ8(const MatMulArgs& a, const Q8Activations& xq, int64_t i0, int64_t j0) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  const size_t row_bytes = Q8RowBytes(a.k);
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + j0 * row_bytes;
  const int64_t codes_at = blocks * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t xk = xq.padded_k, xb = xk / kQ8Block;
  const int8_t* xc = xq.codes.data() + i0 * xk;
  const int32_t* xo = xq.offset.data() + i0 * (xk / 4);
  const float* xsc = xq.scales.data() + i0 * xb;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for (int64_t g = 0; g < blocks; g += 16) {  // 16 blocks share one load of scales
    const int64_t gb = blocks - g < 16 ? blocks - g : 16;
    const __mmask16 smask = static_cast<__mmask16>((1u << gb) - 1);
    __m512 ws16[C], xs16[R];
    for (int c = 0; c < C; ++c) {
      ws16[c] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(smask, w + c * row_bytes + g * 2));
    }
    for (int r = 0; r < R; ++r) xs16[r] = _mm512_maskz_loadu_ps(smask, xsc + r * xb + g);
    for (int64_t p = 0; p < gb; p += 2) {
      const int64_t b = g + p;
      // Prefetch the next tile's weights into L2 (contiguous after this tile's C rows),
      // C + 1 lines per pair of blocks. Q8 rows are short (k = 768: 13 lines): the
      // hardware prefetcher does not ramp up on them, and decode ran 1.4x slower without.
      const char* pf = reinterpret_cast<const char*>(w) + C * row_bytes + b / 2 * (C + 1) * 64;
      for (int i = 0; i <= C; ++i) _mm_prefetch(pf + i * 64, _MM_HINT_T1);
      const __m512i idx = _mm512_add_epi32(halves, _mm512_set1_epi32(static_cast<int>(p)));
      const __mmask64 wmask = b + 1 < blocks ? ~0ull : 0xFFFFFFFFull;
      __m512i xv[R], xoff[R];
      __m512 xs[R];
      for (int r = 0; r < R; ++r) {
        xv[r] = _mm512_loadu_si512(xc + r * xk + b * kQ8Block);
        xoff[r] = _mm512_loadu_si512(xo + r * (xk / 4) + b * (kQ8Block / 4));
        xs[r] = _mm512_permutexvar_ps(idx, xs16[r]);
      }
      for (int c = 0; c < C; ++c) {
        const __m512i wv = _mm512_xor_si512(
            _mm512_maskz_loadu_epi8(wmask, w + c * row_bytes + codes_at + b * kQ8Block), bias);
        const __m512 ws = _mm512_permutexvar_ps(idx, ws16[c]);
        for (int r = 0; r < R; ++r) {
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(xoff[r], wv, xv[r]));
          acc[r][c] = _mm512_fmadd_ps(dot, _mm512_mul_ps(xs[r], ws), acc[r][c]);
        }
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

template <int R>
TileQ8Fn PickColsQ8(int cols) {
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

template <int R, DType D>
TileFn PickCols(int cols) {
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

TileQ8Fn PickTileQ8Vnni(int rows, int cols) {
  switch (rows) {
    case 1: return PickColsQ8<1>(cols);
    case 2: return PickColsQ8<2>(cols);
    case 3: return PickColsQ8<3>(cols);
    default: return PickColsQ8<4>(cols);
  }
}

TileFn PickTileAvx512(DType w_dtype, int rows, int cols) {
  switch (w_dtype) {
    case DType::kF16:
      return PickRows<DType::kF16>(rows, cols);
    case DType::kBF16:
      return PickRows<DType::kBF16>(rows, cols);
    default:
      return PickRows<DType::kF32>(rows, cols);
  }
}

}  // namespace kvfold::kernels::cpu
