// Q8 weight tiles of the portable and AVX2 paths (matmul_tiles.h). A row's last, partial
// block reads x from a zero-padded copy (its codes past k are 0 by the format).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "common/fp16.h"
#include "kernels/cpu/matmul_tiles.h"

namespace kvfold::kernels::cpu {
namespace {

// Pointers to the kQ8Block activations of rows i0.. at column t, padded with zeros past k.
template <int R>
struct BlockX {
  const float* p[R];
  float pad[R][kQ8Block];
  BlockX(const MatMulArgs& a, int64_t i0, int64_t t) {
    for (int r = 0; r < R; ++r) {
      const float* x = a.x + (i0 + r) * a.k + t;
      if (t + kQ8Block <= a.k) {
        p[r] = x;
      } else {
        std::fill(pad[r], pad[r] + kQ8Block, 0.0f);
        std::copy(x, x + (a.k - t), pad[r]);
        p[r] = pad[r];
      }
    }
  }
};

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
  const int8_t* Codes(int c, int64_t t) const {
    return reinterpret_cast<const int8_t*>(w + c * row_bytes + codes_at) + t;
  }
};

inline float Tree8(const float* v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

template <int R, int C>
void TilePortableQ8(const MatMulArgs& a, int64_t i0, int64_t j0) {
  float acc[R][C][8] = {};
  const Q8Rows w(a, j0);
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockX<R> x(a, i0, b * kQ8Block);
    for (int c = 0; c < C; ++c) {
      const float d = w.Scale(c, b);
      const int8_t* q = w.Codes(c, b * kQ8Block);
      for (int r = 0; r < R; ++r) {
        for (int l = 0; l < 8; ++l) {
          float blk = x.p[r][l] * static_cast<float>(q[l]);
          for (int s = 1; s < kQ8Block / 8; ++s) {
            blk = __builtin_fmaf(x.p[r][s * 8 + l], static_cast<float>(q[s * 8 + l]), blk);
          }
          acc[r][c][l] = __builtin_fmaf(blk, d, acc[r][c][l]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = Tree8(acc[r][c]);
      if (a.bias) s += a.bias[j0 + c];
      a.out[(i0 + r) * a.m + j0 + c] = s;
    }
  }
}

#define KVFOLD_AVX2 __attribute__((target("avx2,fma,f16c")))

KVFOLD_AVX2 inline __m256 Codes8(const int8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

// Same tree as Tree8.
KVFOLD_AVX2 inline float HSum8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

template <int R, int C>
KVFOLD_AVX2 void TileAvx2Q8(const MatMulArgs& a, int64_t i0, int64_t j0) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const Q8Rows w(a, j0);
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockX<R> x(a, i0, b * kQ8Block);
    for (int c = 0; c < C; ++c) {
      const __m256 d = _mm256_set1_ps(w.Scale(c, b));
      const int8_t* q = w.Codes(c, b * kQ8Block);
      const __m256 w0 = Codes8(q), w1 = Codes8(q + 8), w2 = Codes8(q + 16), w3 = Codes8(q + 24);
      for (int r = 0; r < R; ++r) {
        __m256 blk = _mm256_mul_ps(_mm256_loadu_ps(x.p[r]), w0);
        blk = _mm256_fmadd_ps(_mm256_loadu_ps(x.p[r] + 8), w1, blk);
        blk = _mm256_fmadd_ps(_mm256_loadu_ps(x.p[r] + 16), w2, blk);
        blk = _mm256_fmadd_ps(_mm256_loadu_ps(x.p[r] + 24), w3, blk);
        acc[r][c] = _mm256_fmadd_ps(blk, d, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = HSum8(acc[r][c]);
      if (a.bias) s += a.bias[j0 + c];
      a.out[(i0 + r) * a.m + j0 + c] = s;
    }
  }
}

template <int R>
TileFn PickCols(bool avx2, int cols) {
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

TileFn PickTileQ8(bool avx2, int rows, int cols) {
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
