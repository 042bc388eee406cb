// Q8 weight tiles of the portable and AVX2 paths (matmul_tiles.h) on int8 activations
// (cpu_ops.h Q8Activations). Per output, block b and lane l (0..7): the integer sum
// s = x[4l..4l+3] . w[4l..4l+3] of the block's codes (exact), then
// acc[l] = fma(float(s), x_scale[b] * w_scale[b], acc[l]); finally the 8-lane tree
// ((0+4)+(2+6))+((1+5)+(3+7)). AVX2 gets s from maddubs/madd (|x| times w with x's
// sign; no pair exceeds 2 * 127 * 127, so nothing saturates); the portable path sums
// the same integers, so both paths give identical bits.
#include <immintrin.h>

#include <cstring>

#include "common/fp16.h"
#include "kernels/cpu/matmul_tiles.h"

namespace kvfold::kernels::cpu {
namespace {

struct Q8Rows {
  const uint8_t* w;
  size_t row_bytes;
  int64_t codes_at;
  Q8Rows(const MatMulArgs& a, int64_t j0) {
    const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
    row_bytes = Q8RowBytes(a.k);
    w = static_cast<const uint8_t*>(a.w) + j0 * row_bytes;
    codes_at = blocks * static_cast<int64_t>(sizeof(uint16_t));
  }
  float Scale(int c, int64_t b) const {
    uint16_t h;
    std::memcpy(&h, w + c * row_bytes + b * sizeof(uint16_t), sizeof(h));
    return Fp16ToFp32(h);
  }
  const int8_t* Codes(int c, int64_t b) const {
    return reinterpret_cast<const int8_t*>(w + c * row_bytes + codes_at) + b * kQ8Block;
  }
};

// Rows i0.. of the quantized activations.
struct XRows {
  const int8_t* codes;
  const float* scales;
  int64_t stride, blocks_stride;
  XRows(const Q8Activations& xq, int64_t i0)
      : codes(xq.codes.data() + i0 * xq.padded_k),
        scales(xq.scales.data() + i0 * (xq.padded_k / kQ8Block)),
        stride(xq.padded_k),
        blocks_stride(xq.padded_k / kQ8Block) {}
  const int8_t* Codes(int r, int64_t b) const { return codes + r * stride + b * kQ8Block; }
  float Scale(int r, int64_t b) const { return scales[r * blocks_stride + b]; }
};

inline float Tree8(const float* v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

inline void Store(const MatMulArgs& a, int64_t i, int64_t j, float s) {
  if (a.bias) s += a.bias[j];
  a.out[i * a.m + j] = s;
}

template <int R, int C>
void TilePortableQ8(const MatMulArgs& a, const Q8Activations& xq, int64_t i0, int64_t j0) {
  float acc[R][C][8] = {};
  const Q8Rows w(a, j0);
  const XRows x(xq, i0);
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int c = 0; c < C; ++c) {
      const float ws = w.Scale(c, b);
      const int8_t* q = w.Codes(c, b);
      for (int r = 0; r < R; ++r) {
        const int8_t* p = x.Codes(r, b);
        const float s = x.Scale(r, b) * ws;
        for (int l = 0; l < 8; ++l) {
          int32_t dot = 0;
          for (int e = 4 * l; e < 4 * l + 4; ++e) dot += int32_t{p[e]} * int32_t{q[e]};
          acc[r][c][l] = __builtin_fmaf(static_cast<float>(dot), s, acc[r][c][l]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) Store(a, i0 + r, j0 + c, Tree8(acc[r][c]));
}

#define KVFOLD_AVX2 __attribute__((target("avx2,fma,f16c")))

// Same tree as Tree8.
KVFOLD_AVX2 inline float HSum8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

template <int R, int C>
KVFOLD_AVX2 void TileAvx2Q8(const MatMulArgs& a, const Q8Activations& xq, int64_t i0, int64_t j0) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const Q8Rows w(a, j0);
  const XRows x(xq, i0);
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i xv[R], ax[R];
    __m256 xs[R];
    for (int r = 0; r < R; ++r) {
      xv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.Codes(r, b)));
      ax[r] = _mm256_abs_epi8(xv[r]);
      xs[r] = _mm256_set1_ps(x.Scale(r, b));
    }
    for (int c = 0; c < C; ++c) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.Codes(c, b)));
      const __m256 ws = _mm256_set1_ps(w.Scale(c, b));
      for (int r = 0; r < R; ++r) {
        const __m256i p16 = _mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(wv, xv[r]));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[r][c] = _mm256_fmadd_ps(dot, _mm256_mul_ps(xs[r], ws), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) Store(a, i0 + r, j0 + c, HSum8(acc[r][c]));
}

template <int R>
TileQ8Fn PickCols(bool avx2, int cols) {
  switch (cols) {
    case 1:
      return avx2 ? TileAvx2Q8<R, 1> : TilePortableQ8<R, 1>;
    case 2:
      return avx2 ? TileAvx2Q8<R, 2> : TilePortableQ8<R, 2>;
    case 3:
      return avx2 ? TileAvx2Q8<R, 3> : TilePortableQ8<R, 3>;
    default:
      return avx2 ? TileAvx2Q8<R, 4> : TilePortableQ8<R, 4>;
  }
}

}  // namespace

TileQ8Fn PickTileQ8(bool avx2, int rows, int cols) {
  switch (rows) {
    case 1:
      return PickCols<1>(avx2, cols);
    case 2:
      return PickCols<2>(avx2, cols);
    case 3:
      return PickCols<3>(avx2, cols);
    default:
      return PickCols<4>(avx2, cols);
  }
}

}  // namespace kvfold::kernels::cpu
