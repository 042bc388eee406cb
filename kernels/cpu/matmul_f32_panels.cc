// F32 matmul on AVX-512 over F32 panels (cpu_ops.h PanelKind::kF32).
//
// A panel holds 16 weight rows transposed, [k][16]: the 64-byte vector at t is weight t of
// 16 output columns. A tile of R rows x P panels keeps R * P accumulators (one per row and
// 16 columns) in registers; per t it loads P weight vectors and broadcasts each row's x[t]
// into them. out[i, j] is therefore one fma chain over k in order, in lane j % 16:
//   acc = fma(x[i, t], w[j, t], acc), t = 0 .. k - 1;   out = acc (+ bias[j])
// which no choice of R, P, thread split or number of rows changes: prefill and decode give
// the same bits. The lane tiles (matmul_avx512.cc) instead keep 16 lane partial sums per
// output and reduce them by a tree: 24 products per 10 loads, plus a reduction per output,
// and a batch reads each weight block once per 4-row tile. Here a batch of 8 rows uses each
// weight vector 8 times from a register (docs/engine-measurements.md, "F32 panels on the EPYC").
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_tiles.h"

namespace kvfold::kernels::cpu {
namespace {

#define KVFOLD_AVX512 __attribute__((target("avx512f")))

constexpr int kCols = kQ8PanelRows;  // output columns per panel (vector lanes)
constexpr int kMaxRows = 8;          // rows of x per tile
constexpr int kBatchPanels = 3;      // panels per tile with more than one row (24 accumulators)
constexpr int kDecodePanels = 4;     // panels per tile of a single row (four weight streams)
// Each weight stream is asked for this far ahead (16 lines), into L2 (T2): into L1 (T0)
// the prefetches hold the core's L1 miss buffers for a whole memory latency, and a single
// row stalled on them (on the EPYC, T2 made a one-row decode 1.3x faster at 1 thread and
// 1.1x at 2, the 16-row step unchanged; docs/engine-measurements.md, "Panel prefetch into L2").
// A one-row tile asks only where RowPrefetchActive() (isa.h: not on Zen 5).
constexpr int64_t kPrefetchFloats = 256;

// out[i0 .. i0 + R, j0 .. j0 + 16 P] from the P panels that start at column j0.
template <int R, int P>
KVFOLD_AVX512 void PanelTile(const MatMulArgs& a, const float* panels, int64_t i0, int64_t j0) {
  const int64_t k = a.k;
  const float* w = panels + j0 * k;  // panel j0 / 16 starts at (j0 / 16) * 16 * k
  const float* x = a.x + i0 * k;
  const bool prefetch = R > 1 || RowPrefetchActive();
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < k; ++t) {
    __m512 wv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const float* at = w + p * kCols * k + t * kCols;
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(at + kPrefetchFloats), _MM_HINT_T2);
      wv[p] = _mm512_loadu_ps(at);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * k + t]);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xb, wv[p], acc[r][p]);
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
    const __m512 bias = a.bias ? _mm512_loadu_ps(a.bias + j0 + p * kCols) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 v = a.bias ? _mm512_add_ps(acc[r][p], bias) : acc[r][p];
      _mm512_storeu_ps(a.out + (i0 + r) * a.m + j0 + p * kCols, v);
    }
  }
}

using TileFn = void (*)(const MatMulArgs&, const float*, int64_t, int64_t);

template <int R, int... P>
constexpr std::array<TileFn, sizeof...(P)> RowTiles(std::integer_sequence<int, P...>) {
  return {PanelTile<R, P + 1>...};
}
template <int... R>
constexpr std::array<std::array<TileFn, kBatchPanels>, sizeof...(R)> Tiles(
    std::integer_sequence<int, R...>) {
  return {RowTiles<R + 1>(std::make_integer_sequence<int, kBatchPanels>{})...};
}
// kTiles[r - 1][p - 1]: the tile of r rows and p panels (r >= 2 or p <= kBatchPanels).
constexpr auto kTiles = Tiles(std::make_integer_sequence<int, kMaxRows>{});
constexpr auto kDecodeTiles =
    RowTiles<1>(std::make_integer_sequence<int, kDecodePanels>{});  // one row, 1 .. 4 panels

}  // namespace

void PackF32Panels(ThreadPool* pool, const float* w, int64_t m, int64_t k, float* panels) {
  auto body = [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      const float* rows = w + g * kCols * k;
      float* panel = panels + g * kCols * k;
      for (int64_t t = 0; t < k; ++t) {
        for (int o = 0; o < kCols; ++o) panel[t * kCols + o] = rows[o * k + t];
      }
    }
  };
  if (pool == nullptr) {
    body(0, m / kCols, 0);
  } else {
    pool->ParallelFor(m / kCols, 1, body);
  }
}

void MatMulF32Panels(ThreadPool& pool, const MatMulArgs& a, PanelScratch& scratch) {
  const float* panels =
      reinterpret_cast<const float*>(CallPanels(pool, a, PanelKind::kF32, scratch));
  // A task is a column block of a tile's panels and a chunk of up to kChunkRows rows; a
  // block's panels stay in L2 while every row tile of the chunk passes over them, so a
  // batch reads each weight from memory once per call. Consecutive tasks share their
  // block (a thread's range of tasks reuses it). Row chunks let a long prompt use every
  // thread on a matrix of few blocks (stories260K's 64 x 64: two).
  constexpr int64_t kChunkRows = 16 * kMaxRows;
  const int per_block = a.n == 1 ? kDecodePanels : kBatchPanels;
  const int64_t num_panels = a.m / kCols;
  const int64_t num_blocks = (num_panels + per_block - 1) / per_block;
  const int64_t chunks = (a.n + kChunkRows - 1) / kChunkRows;
  auto body = [&](int64_t t0, int64_t t1, int) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t p0 = task / chunks * per_block;
      const int np = static_cast<int>(std::min<int64_t>(per_block, num_panels - p0));
      if (a.n == 1) {
        kDecodeTiles[np - 1](a, panels, 0, p0 * kCols);
        continue;
      }
      const int64_t i_end = std::min(a.n, (task % chunks + 1) * kChunkRows);
      for (int64_t i = task % chunks * kChunkRows; i < i_end; i += kMaxRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, i_end - i));
        kTiles[rows - 1][np - 1](a, panels, i, p0 * kCols);
      }
    }
  };
  if (a.n * a.m * a.k < (1 << 16)) {
    body(0, num_blocks * chunks, 0);
  } else {
    pool.ParallelFor(num_blocks * chunks, 1, body);
  }
}

}  // namespace kvfold::kernels::cpu
