// Batch-invariant matrix multiply: out[i, j] = sum_k x[i, k] * w[j, k] (+ bias[j]).
//
// The value of out[i, j] depends only on row i of x and row j of w: the accumulation
// order over k is fixed by the kernel path (reference: one sequential float sum; portable
// and AVX2: 8 lane partial sums over k in steps of 8, reduced in a fixed tree, then a
// sequential tail; AVX-512: 16 lanes, matmul_tiles.h), never by the number of rows or
// the tiling. Q8 weights multiply the row's int8 codes (cpu_ops.h Q8Activations, a
// function of that row alone) with exact integer dots per block. Tiles (rows x cols) only
// decide which independent outputs are computed together, so prefill (n rows) and decode
// (1 row) produce identical bits.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "common/fp16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_tiles.h"

namespace kvfold::kernels::cpu {

float LoadAsF32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF16:
      return Fp16ToFp32(static_cast<const uint16_t*>(data)[i]);
    case DType::kBF16:
      return Bf16ToFp32(static_cast<const uint16_t*>(data)[i]);
    case DType::kI32:
      return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    case DType::kI8:
      return static_cast<float>(static_cast<const int8_t*>(data)[i]);
    case DType::kQ8:  // blocked rows: Q8At
    case DType::kF8:  // not a tensor dtype of any backend (planner estimates only)
    case DType::kI4:
      return 0.0f;
  }
  return 0.0f;
}

float Q8At(const void* w, int64_t k, int64_t j, int64_t t) {
  const uint8_t* row = static_cast<const uint8_t*>(w) + j * Q8RowBytes(k);
  const int64_t blocks = (k + kQ8Block - 1) / kQ8Block;
  uint16_t h;
  std::memcpy(&h, row + (t / kQ8Block) * sizeof(uint16_t), sizeof(h));
  const int8_t code = static_cast<int8_t>(row[blocks * sizeof(uint16_t) + t]);
  return Fp16ToFp32(h) * static_cast<float>(code);
}

namespace {

// Q8 weights: x quantized per row and block (cpu_ops.h), then per output and block the
// exact integer dot of the codes, summed in order as float(dot) * (x_scale * w_scale).
void MatMulReferenceQ8(const MatMulArgs& a, Q8Activations& xq) {
  QuantizeActivationsQ8(nullptr, a.x, a.n, a.k, Q8Offsets::kNone, xq);
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  const size_t row_bytes = Q8RowBytes(a.k);
  for (int64_t i = 0; i < a.n; ++i) {
    const int8_t* xc = xq.codes.data() + i * xq.padded_k;
    const float* xs = xq.scales.data() + i * (xq.padded_k / kQ8Block);
    for (int64_t j = 0; j < a.m; ++j) {
      const uint8_t* row = static_cast<const uint8_t*>(a.w) + j * row_bytes;
      const int8_t* wc = reinterpret_cast<const int8_t*>(row + blocks * sizeof(uint16_t));
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t dot = 0;
        for (int64_t t = b * kQ8Block; t < (b + 1) * kQ8Block; ++t) {
          dot += int32_t{xc[t]} * int32_t{wc[t]};
        }
        uint16_t h;
        std::memcpy(&h, row + b * sizeof(uint16_t), sizeof(h));
        acc += static_cast<float>(dot) * (xs[b] * Fp16ToFp32(h));
      }
      a.out[i * a.m + j] = a.bias ? acc + a.bias[j] : acc;
    }
  }
}

}  // namespace

void MatMulReference(const MatMulArgs& a, MatMulScratch& scratch) {
  if (a.w_dtype == DType::kQ8) return MatMulReferenceQ8(a, scratch.q8);
  for (int64_t i = 0; i < a.n; ++i) {
    const float* x = a.x + i * a.k;
    for (int64_t j = 0; j < a.m; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < a.k; ++t) acc += x[t] * LoadAsF32(a.w, a.w_dtype, j * a.k + t);
      a.out[i * a.m + j] = a.bias ? acc + a.bias[j] : acc;
    }
  }
}

bool CpuHasAvx2Fma() { return ActiveIsa() >= Isa::kAvx2; }

namespace {

// ---- Portable path: 8 partial sums per output, same structure as the AVX2 kernel. ----
template <int R, int C>
void TilePortable(const MatMulArgs& a, int64_t i0, int64_t j0) {
  float acc[R][C][8] = {};
  const int64_t k8 = a.k / 8 * 8;
  float wrow[C][8];
  for (int64_t t = 0; t < k8; t += 8) {
    for (int c = 0; c < C; ++c)
      for (int l = 0; l < 8; ++l) wrow[c][l] = LoadAsF32(a.w, a.w_dtype, (j0 + c) * a.k + t + l);
    for (int r = 0; r < R; ++r) {
      const float* x = a.x + (i0 + r) * a.k + t;
      for (int c = 0; c < C; ++c)
        for (int l = 0; l < 8; ++l) acc[r][c][l] = __builtin_fmaf(x[l], wrow[c][l], acc[r][c][l]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float* x = a.x + (i0 + r) * a.k;
    for (int c = 0; c < C; ++c) {
      const float* v = acc[r][c];
      float s = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
      for (int64_t t = k8; t < a.k; ++t)
        s = __builtin_fmaf(x[t], LoadAsF32(a.w, a.w_dtype, (j0 + c) * a.k + t), s);
      if (a.bias) s += a.bias[j0 + c];
      a.out[(i0 + r) * a.m + j0 + c] = s;
    }
  }
}

// ---- AVX2 path. ----
__attribute__((target("avx2,fma,f16c"))) inline __m256 Load8(const void* w, DType dtype,
                                                              int64_t off) {
  switch (dtype) {
    case DType::kF16:
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + off)));
    case DType::kBF16: {
      const __m128i h =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + off));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    default:
      return _mm256_loadu_ps(static_cast<const float*>(w) + off);
  }
}

// Same reduction tree as TilePortable: ((0+4)+(2+6)) + ((1+5)+(3+7)).
__attribute__((target("avx2,fma,f16c"))) inline float HSum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  const __m128 s4 = _mm_add_ps(lo, hi);                      // 0+4, 1+5, 2+6, 3+7
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));   // (0+4)+(2+6), (1+5)+(3+7)
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

template <int R, int C>
__attribute__((target("avx2,fma,f16c"))) void TileAvx2(const MatMulArgs& a, int64_t i0,
                                                         int64_t j0) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t k8 = a.k / 8 * 8;
  for (int64_t t = 0; t < k8; t += 8) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = Load8(a.w, a.w_dtype, (j0 + c) * a.k + t);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(a.x + (i0 + r) * a.k + t);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float* x = a.x + (i0 + r) * a.k;
    for (int c = 0; c < C; ++c) {
      float s = HSum(acc[r][c]);
      for (int64_t t = k8; t < a.k; ++t)
        s = __builtin_fmaf(x[t], LoadAsF32(a.w, a.w_dtype, (j0 + c) * a.k + t), s);
      if (a.bias) s += a.bias[j0 + c];
      a.out[(i0 + r) * a.m + j0 + c] = s;
    }
  }
}

template <int R>
TileFn PickTile(bool avx2, int cols) {
  switch (cols) {
    case 1:
      return avx2 ? TileAvx2<R, 1> : TilePortable<R, 1>;
    case 2:
      return avx2 ? TileAvx2<R, 2> : TilePortable<R, 2>;
    case 3:
      return avx2 ? TileAvx2<R, 3> : TilePortable<R, 3>;
    default:
      return avx2 ? TileAvx2<R, 4> : TilePortable<R, 4>;
  }
}

TileFn Pick(Isa isa, DType w_dtype, int rows, int cols) {
  if (isa == Isa::kAvx512) return PickTileAvx512(w_dtype, rows, cols);
  const bool avx2 = isa == Isa::kAvx2;
  switch (rows) {
    case 1:
      return PickTile<1>(avx2, cols);
    case 2:
      return PickTile<2>(avx2, cols);
    case 3:
      return PickTile<3>(avx2, cols);
    default:
      return PickTile<4>(avx2, cols);
  }
}

// Q8 on AVX-512 without VNNI runs the AVX2 tiles.
bool UseVnni(Isa isa) { return isa == Isa::kAvx512 && CpuHasAvx512Vnni(); }

TileQ8Fn PickQ8(Isa isa, int rows, int cols) {
  if (UseVnni(isa)) return PickTileQ8Vnni(rows, cols);
  return PickTileQ8(isa >= Isa::kAvx2, rows, cols);
}

// Output columns per tile. AVX2 (16 ymm): decode 1 x 4, prefill 4 x 3 (12 accumulators;
// Q8 4 x 2). AVX-512 (32 zmm): decode 1 x 8 (eight weight rows streamed at once),
// otherwise 4 x 6 (Q8 4 x 4).
int TileCols(Isa isa, DType w_dtype, int64_t n) {
  const bool q8 = w_dtype == DType::kQ8;
  if (isa == Isa::kAvx512 && (!q8 || UseVnni(isa))) return n == 1 ? kAvx512MaxCols : q8 ? 4 : 6;
  return n >= 4 ? (q8 ? 2 : 3) : 4;
}

// Columns per task: weights of one column block stay in cache while all row tiles pass,
// so a batch of rows streams each weight from memory once.
constexpr int64_t kColBlock = 64;

// Runs tile(rows, cols, i, j) over out[n, m]: threads take column blocks, each block
// visits all row tiles of up to 4 rows. `tile` chooses the kernel for (rows, cols).
template <typename TileAt>
void ForEachTile(ThreadPool& pool, const MatMulArgs& a, int tile_cols, TileAt& tile) {
  const int64_t col_block = kColBlock / tile_cols * tile_cols;
  const int64_t num_col_blocks = (a.m + col_block - 1) / col_block;
  auto body = [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t j_begin = b * col_block;
      const int64_t j_end = std::min(a.m, j_begin + col_block);
      for (int64_t i = 0; i < a.n; i += 4) {
        const int rows = static_cast<int>(std::min<int64_t>(4, a.n - i));
        for (int64_t j = j_begin; j < j_end; j += tile_cols) {
          tile(rows, static_cast<int>(std::min<int64_t>(tile_cols, j_end - j)), i, j);
        }
      }
    }
  };
  if (a.n * a.m * a.k < (1 << 16)) {
    body(0, num_col_blocks, 0);
  } else {
    pool.ParallelFor(num_col_blocks, 1, body);
  }
}

}  // namespace

size_t PanelBytes(PanelKind kind, int64_t m, int64_t k) {
  switch (kind) {
    case PanelKind::kAmx:
    case PanelKind::kVnni:
      return Q8PanelBytes(m, k);
    case PanelKind::kF32:
      return static_cast<size_t>(m) * static_cast<size_t>(k) * sizeof(float);
    case PanelKind::kNone:
      break;
  }
  return 0;
}

size_t PanelSourceBytes(PanelKind kind, int64_t m, int64_t k) {
  return kind == PanelKind::kF32 ? PanelBytes(kind, m, k)
                                 : core::Q8RowBytes(k) * static_cast<size_t>(m);
}

void PackPanels(ThreadPool* pool, PanelKind kind, const void* w, int64_t m, int64_t k,
                uint8_t* panels) {
  if (kind == PanelKind::kF32) {
    PackF32Panels(pool, static_cast<const float*>(w), m, k, reinterpret_cast<float*>(panels));
  } else {
    PackQ8Panels(pool, kind, w, m, k, panels);
  }
}

const uint8_t* CallPanels(ThreadPool& pool, const MatMulArgs& a, PanelKind kind,
                          PanelScratch& scratch) {
  if (a.w_panels != nullptr) return a.w_panels;
  // Grows only (a vector keeps its capacity); 64 bytes of slack so the panels can start on
  // a cache line.
  scratch.panels.resize(PanelBytes(kind, a.m, a.k) + 64);
  uint8_t* at = scratch.panels.data();
  at += (64 - reinterpret_cast<uintptr_t>(at) % 64) % 64;
  PackPanels(&pool, kind, a.w, a.m, a.k, at);
  return at;
}

PanelKind MatMulPanels(const MatMulArgs& a) {
  if (a.m % kQ8PanelRows != 0) return PanelKind::kNone;
  if (a.w_dtype == DType::kF32) {
    return ActiveIsa() == Isa::kAvx512 ? PanelKind::kF32 : PanelKind::kNone;
  }
  if (a.w_dtype != DType::kQ8) return PanelKind::kNone;
  if (AmxActive()) return PanelKind::kAmx;  // AmxActive: the AVX-512 path
  return UseVnni(ActiveIsa()) ? PanelKind::kVnni : PanelKind::kNone;
}

void MatMulOptimized(ThreadPool& pool, const MatMulArgs& a, MatMulScratch& scratch) {
  const Isa isa = ActiveIsa();
  const int tile_cols = TileCols(isa, a.w_dtype, a.n);
  // The path depends on the weights' dtype and shape only, never on n (batch invariance).
  const PanelKind panels = MatMulPanels(a);
  if (panels == PanelKind::kF32) return MatMulF32Panels(pool, a, scratch.panels);
  if (a.w_dtype == DType::kQ8) {
    switch (panels) {
      case PanelKind::kAmx:
        // VNNI offsets only for a row group of one row (RowVnni16 / RowVnni8); tiles
        // multiply signed by signed bytes.
        QuantizeActivationsQ8(&pool, a.x, a.n, a.k,
                              a.n % kQ8PanelRows == 1 ? Q8Offsets::kLanes : Q8Offsets::kNone,
                              scratch.q8);
        MatMulQ8Amx(pool, a, scratch.q8, scratch.panels);
        return;
      case PanelKind::kVnni:
        QuantizeActivationsQ8(&pool, a.x, a.n, a.k, Q8Offsets::kBlocks, scratch.q8);
        MatMulQ8Vnni(pool, a, scratch.q8, scratch.panels);
        return;
      case PanelKind::kF32:
      case PanelKind::kNone:
        break;
    }
    const bool vnni = UseVnni(isa);
    QuantizeActivationsQ8(&pool, a.x, a.n, a.k, vnni ? Q8Offsets::kLanes : Q8Offsets::kNone,
                          scratch.q8);
    const Q8Activations& xq = scratch.q8;
    auto tile = [&](int rows, int cols, int64_t i, int64_t j) { PickQ8(isa, rows, cols)(a, xq, i, j); };
    ForEachTile(pool, a, tile_cols, tile);
    return;
  }
  auto tile = [&](int rows, int cols, int64_t i, int64_t j) { Pick(isa, a.w_dtype, rows, cols)(a, i, j); };
  ForEachTile(pool, a, tile_cols, tile);
}

void MatMulOptimizedProducts(ThreadPool& pool, const MatMulArgs* a, int count,
                             MatMulScratch& scratch) {
  bool shared = count > 1 && count <= kMaxQ8Products;
  for (int p = 0; shared && p < count; ++p) {
    shared = a[p].w_dtype == DType::kQ8 && a[p].w_panels != nullptr &&
             MatMulPanels(a[p]) == PanelKind::kVnni && a[p].x == a[0].x && a[p].n == a[0].n &&
             a[p].k == a[0].k;
  }
  if (!shared) {
    for (int p = 0; p < count; ++p) MatMulOptimized(pool, a[p], scratch);
    return;
  }
  QuantizeActivationsQ8(&pool, a[0].x, a[0].n, a[0].k, Q8Offsets::kBlocks, scratch.q8);
  MatMulQ8VnniProducts(pool, a, count, scratch.q8);
}

}  // namespace kvfold::kernels::cpu
