// Laying out the Q8 panels of both panel paths (cpu_ops.h PanelKind), and the Q8 matmul
// on AVX-512 VNNI without AMX, which reads the VNNI panels:
// the block-dot numerics of the AMX path (matmul_tiles.h), so a machine with AMX and one
// with only AVX-512 VNNI give identical bits. Per output, block by block:
// acc = fma(float(exact integer dot of the block's 32 codes), w_scale * x_scale, acc).
//
// A panel holds 16 output columns; a block of it is eight 64-byte vectors, vector q = the
// 16 columns' codes 4q..4q+3, biased to unsigned (code + 128). vpdpbusd of such a vector
// with x's four codes 4q..4q+3 broadcast adds them to the 16 columns' lanes, so eight of
// them, started from -128 * (sum of x's 32 codes) (Q8Activations::block_offset), give the
// 16 columns' exact block dots: no horizontal sums, and one float conversion, scale
// product and fma per 16 outputs and block. The lane-tile VNNI kernel (matmul_avx512.cc)
// spends three float operations per 4 codes x 16 lanes instead, which bound a 16-row
// batch by arithmetic (docs/engine.md, "Q8 MatMul";
// docs/engine-measurements.md, "VNNI panels on the EPYC").
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_tiles.h"

namespace kvfold::kernels::cpu {
namespace {

#define KVFOLD_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c")))

constexpr int kCols = kQ8PanelRows;                // output columns per panel (vector lanes)
constexpr int kGroups = kQ8Block / 4;              // 4-code groups per block
constexpr int64_t kBlockBytes = kQ8Block * kCols;  // one block of a panel's codes
constexpr int kMaxRows = 16;                       // rows of x per kernel call

// PanelSetRows asks for each panel's codes this many blocks ahead of the block it reads
// (8 KiB over a pair of panels, as far ahead as 16 blocks of one panel were), into L2 (T2).
// Into L1 (T0), each prefetch holds one of the core's few L1 miss buffers for a whole
// memory latency, and one row or a few, which compute little per line, stall on them: on
// the EPYC, T2 at 8 KiB against T0 at 4 KiB made a one-row decode 1.3x faster and a 4-row
// step 1.6x, with the 16-row step unchanged (docs/engine-measurements.md, "Panel prefetch into
// L2"). For a pair, 8 blocks ahead against 16: 16-row steps 0.96-1.0x (docs/engine-measurements.md,
// "Panel pairs").
constexpr int64_t kPrefetchBlocks = 8;

// The VNNI panels of a Q8 weight [m, k] (cpu_ops.h): the codes of every panel, one after
// another, then the scales of every panel. Codes and scales each form one stream for a
// thread's consecutive panels: with each panel's scales in front of its codes, every
// panel broke the code stream, and a pass of 16 rows over two panels at once streamed
// from memory at two thirds of its rate with the scales apart (docs/engine-measurements.md, "Panel
// pairs").
struct VnniPanels {
  const uint8_t* codes;    // [panels][blocks][kGroups][16 columns][4], code + 128
  const uint16_t* scales;  // [panels][blocks][16 columns], fp16
  int64_t blocks;

  const uint8_t* Codes(int64_t panel, int64_t b) const {
    return codes + (panel * blocks + b) * kBlockBytes;
  }
  const uint16_t* Scales(int64_t panel, int64_t b) const {
    return scales + (panel * blocks + b) * kCols;
  }
};

int64_t Blocks(int64_t k) { return (k + kQ8Block - 1) / kQ8Block; }

VnniPanels VnniPanelsOf(const uint8_t* base, int64_t m, int64_t k) {
  const int64_t blocks = Blocks(k);
  return {base, reinterpret_cast<const uint16_t*>(base + (m / kCols) * blocks * kBlockBytes),
          blocks};
}

// out[i0 .. i0 + R, the P panels from `panel` on] = acc (+ the bias).
template <int R, int P>
KVFOLD_VNNI inline void StoreSums(const MatMulArgs& a, const __m512 (&acc)[R][P], int64_t panel,
                                  int64_t i0) {
  for (int p = 0; p < P; ++p) {
    const int64_t j = (panel + p) * kCols;
    const __m512 bias = a.bias ? _mm512_loadu_ps(a.bias + j) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(a.out + (i0 + r) * a.m + j,
                       a.bias ? _mm512_add_ps(acc[r][p], bias) : acc[r][p]);
    }
  }
}

// out[i0 .. i0 + R, the P panels from `panel` on]: per output, the block dot started from
// the block offset, the eight products in order, then one fma per block, so every kernel
// here gives the same bits. One broadcast of x's four codes feeds the P panels' products;
// a pass over one panel at a time (the broadcast folded into each vpdpbusd as a memory
// operand) spent a load per product, and over the same layout ran 1.1-1.17x slower from
// L2 and 1.06-1.12x streamed than a pair of panels (docs/engine-measurements.md, "Panel pairs").
// The P x 8 code vectors of a block stay in registers for all R rows, so the panels are read once
// per call; the R x P sums live in memory (L1). The codes and scales kPrefetchBlocks ahead are
// asked for into L2, past the panels' end those of the next P panels, where the thread's next call
// reads.
template <int R, int P>
KVFOLD_VNNI void PanelSetRows(const MatMulArgs& a, const VnniPanels& w, int64_t panel,
                              const Q8Activations& xq, int64_t i0) {
  const int64_t blocks = w.blocks;
  const int64_t xk = xq.padded_k, xb = xk / kQ8Block;
  const int8_t* xc = xq.codes.data() + i0 * xk;
  const int32_t* xo = xq.block_offset.data() + i0 * xb;
  const float* xs = xq.scales.data() + i0 * xb;
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t ahead = b + kPrefetchBlocks;
    const int64_t ahead_panel = panel + P * (ahead / blocks), ahead_b = ahead % blocks;
    __m512i wq[P][kGroups];
    __m512 ws[P];
    for (int p = 0; p < P; ++p) {
      const char* next = reinterpret_cast<const char*>(w.Codes(ahead_panel + p, ahead_b));
      for (int l = 0; l < kBlockBytes / 64; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T2);
      _mm_prefetch(reinterpret_cast<const char*>(w.Scales(ahead_panel + p, ahead_b)), _MM_HINT_T2);
      const uint8_t* codes = w.Codes(panel + p, b);
      for (int q = 0; q < kGroups; ++q) wq[p][q] = _mm512_loadu_si512(codes + 64 * q);
      ws[p] = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.Scales(panel + p, b))));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int8_t* x = xc + r * xk + b * kQ8Block;
      __m512i d[P];
      for (int p = 0; p < P; ++p) d[p] = _mm512_set1_epi32(xo[r * xb + b]);
#pragma GCC unroll 8
      for (int q = 0; q < kGroups; ++q) {
        int32_t x4;
        std::memcpy(&x4, x + 4 * q, sizeof(x4));
        const __m512i xv = _mm512_set1_epi32(x4);
        for (int p = 0; p < P; ++p) d[p] = _mm512_dpbusd_epi32(d[p], wq[p][q], xv);
      }
      const __m512 s = _mm512_set1_ps(xs[r * xb + b]);
      for (int p = 0; p < P; ++p) {
        acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[p]), _mm512_mul_ps(ws[p], s), acc[r][p]);
      }
    }
  }
  StoreSums<R, P>(a, acc, panel, i0);
}

// R rows of x (rows i ..) over the P panels from `panel` on: the same operations per
// output as PanelSetRows, so the same bits. A few rows compute little per line and wait
// on memory: one core kept one panel's stream at ~17 GB/s where four panels read side by
// side (four streams, each asked for kRowPrefetchBlocks ahead) keep ~19, as the F32
// panels' decode tile reads four (docs/engine-measurements.md, "Four panel streams for a few
// rows"). Each code vector feeds the R rows' products, each broadcast of x the P panels'.
// A single row asks only where RowPrefetchActive() (isa.h: not on Zen 5).
constexpr int kRowPanels = 4;
constexpr int64_t kRowPrefetchBlocks = 4;

template <int R, int P>
KVFOLD_VNNI void RowPanels(const MatMulArgs& a, const VnniPanels& w, int64_t panel,
                           const Q8Activations& xq, int64_t i) {
  const int64_t blocks = w.blocks;
  const int64_t xk = xq.padded_k, xb = xk / kQ8Block;
  const int8_t* xc = xq.codes.data() + i * xk;
  const int32_t* xo = xq.block_offset.data() + i * xb;
  const float* xs = xq.scales.data() + i * xb;
  const bool prefetch = R > 1 || RowPrefetchActive();
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i d[R][P];
    // Each panel's codes and scales kRowPrefetchBlocks ahead; past their end, those of the
    // same panel in the next column block (kRowPanels panels on), which the thread's
    // next call (its claimed range is consecutive blocks) starts with.
    const bool wrap = b + kRowPrefetchBlocks >= blocks;
    const int64_t ahead_b = wrap ? b + kRowPrefetchBlocks - blocks : b + kRowPrefetchBlocks;
    for (int p = 0; p < P; ++p) {
      const int64_t ahead_panel = panel + p + (wrap ? kRowPanels : 0);
      const char* ahead = reinterpret_cast<const char*>(w.Codes(ahead_panel, ahead_b));
      if (prefetch) {
        for (int l = 0; l < kBlockBytes / 64; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T2);
        _mm_prefetch(reinterpret_cast<const char*>(w.Scales(ahead_panel, ahead_b)), _MM_HINT_T2);
      }
      for (int r = 0; r < R; ++r) d[r][p] = _mm512_set1_epi32(xo[r * xb + b]);
    }
    for (int q = 0; q < kGroups; ++q) {
      __m512i wq[P];
      for (int p = 0; p < P; ++p) wq[p] = _mm512_loadu_si512(w.Codes(panel + p, b) + 64 * q);
      for (int r = 0; r < R; ++r) {
        int32_t x4;
        std::memcpy(&x4, xc + r * xk + b * kQ8Block + 4 * q, sizeof(x4));
        const __m512i xv = _mm512_set1_epi32(x4);
        for (int p = 0; p < P; ++p) d[r][p] = _mm512_dpbusd_epi32(d[r][p], wq[p], xv);
      }
    }
    for (int p = 0; p < P; ++p) {
      const __m512 ws = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.Scales(panel + p, b))));
      for (int r = 0; r < R; ++r) {
        acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r][p]),
                                    _mm512_mul_ps(ws, _mm512_set1_ps(xs[r * xb + b])), acc[r][p]);
      }
    }
  }
  StoreSums<R, P>(a, acc, panel, i);
}

using PanelFn = void (*)(const MatMulArgs&, const VnniPanels&, int64_t, const Q8Activations&,
                         int64_t);
// Row groups of up to this many rows take RowPanels; larger ones PanelSetRows, whose rows
// are bound by arithmetic, not by the number of streams.
constexpr int kStreamRows = 4;
template <int R>
constexpr std::array<PanelFn, kRowPanels> RowKernelsOf() {
  return {RowPanels<R, 1>, RowPanels<R, 2>, RowPanels<R, 3>, RowPanels<R, 4>};
}
// kRowKernels[r - 1][p - 1]: r rows over p panels.
constexpr std::array<std::array<PanelFn, kRowPanels>, kStreamRows> kRowKernels = {
    RowKernelsOf<1>(), RowKernelsOf<2>(), RowKernelsOf<3>(), RowKernelsOf<4>()};

template <int P, int... R>
constexpr std::array<PanelFn, sizeof...(R)> SetKernels(std::integer_sequence<int, R...>) {
  return {PanelSetRows<kStreamRows + 1 + R, P>...};
}
// kSetKernels[p - 1][r - kStreamRows - 1]: r rows over p panels (groups of up to
// kStreamRows rows take RowPanels).
constexpr std::array<std::array<PanelFn, kMaxRows - kStreamRows>, 2> kSetKernels = {
    SetKernels<1>(std::make_integer_sequence<int, kMaxRows - kStreamRows>{}),
    SetKernels<2>(std::make_integer_sequence<int, kMaxRows - kStreamRows>{})};

}  // namespace

void PackQ8Panels(ThreadPool* pool, PanelKind kind, const void* w, int64_t m, int64_t k,
                  uint8_t* panels) {
  const int64_t blocks = Blocks(k);
  const size_t row_bytes = Q8RowBytes(k);
  // kAmx: per panel its scales (zero-padded to whole lines), then its codes; kVnni: every
  // panel's codes, then every panel's scales (VnniPanels).
  const size_t amx_scale_bytes = Q8PanelScaleBytes(k), amx_panel_bytes = Q8PanelBytes(kCols, k);
  uint16_t* vnni_scales = reinterpret_cast<uint16_t*>(panels + (m / kCols) * blocks * kBlockBytes);
  auto body = [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      uint8_t* codes;
      uint16_t* scales;
      if (kind == PanelKind::kAmx) {
        uint8_t* panel = panels + g * amx_panel_bytes;
        std::memset(panel, 0, amx_scale_bytes);
        scales = reinterpret_cast<uint16_t*>(panel);
        codes = panel + amx_scale_bytes;
      } else {
        scales = vnni_scales + g * blocks * kCols;
        codes = panels + g * blocks * kBlockBytes;
      }
      for (int o = 0; o < kCols; ++o) {
        const uint8_t* row = static_cast<const uint8_t*>(w) + (g * kCols + o) * row_bytes;
        const uint8_t* row_codes = row + blocks * sizeof(uint16_t);
        for (int64_t b = 0; b < blocks; ++b) {
          std::memcpy(scales + b * kCols + o, row + b * sizeof(uint16_t), sizeof(uint16_t));
          const uint8_t* block = row_codes + b * kQ8Block;
          if (kind == PanelKind::kAmx) {  // [blocks][16 rows][32 codes]
            std::memcpy(codes + b * kBlockBytes + o * kQ8Block, block, kQ8Block);
            continue;
          }
          for (int q = 0; q < kGroups; ++q) {  // [blocks][8 groups][16 rows][4 codes]
            uint32_t four;
            std::memcpy(&four, block + 4 * q, sizeof(four));
            four ^= 0x80808080u;  // int8 code -> code + 128 as uint8
            std::memcpy(codes + b * kBlockBytes + (q * kCols + o) * 4, &four, sizeof(four));
          }
        }
      }
    }
  };
  if (pool == nullptr) {
    body(0, m / kCols, 0);
  } else {
    pool->ParallelFor(m / kCols, 1, body);
  }
}

namespace {

// Threads take blocks of 64 output columns; every row group passes over a block while its
// panels sit in L2, so each weight is read from memory once per call.
constexpr int64_t kColBlock = kRowPanels * kCols;

int64_t ColumnBlocks(const MatMulArgs& a) { return (a.m + kColBlock - 1) / kColBlock; }

// Column block cb of a (w: its VNNI panels), every row group: up to kStreamRows
// rows over the block's panels side by side, more over its panels two at a time (an odd
// last panel alone).
void RunColumnBlock(const MatMulArgs& a, const VnniPanels& w, const Q8Activations& xq, int64_t cb) {
  const int64_t p0 = cb * kRowPanels, p_end = std::min(a.m / kCols, p0 + kRowPanels);
  for (int64_t i = 0; i < a.n; i += kMaxRows) {
    const int64_t rows = std::min<int64_t>(kMaxRows, a.n - i);
    if (rows <= kStreamRows) {
      kRowKernels[rows - 1][p_end - p0 - 1](a, w, p0, xq, i);
      continue;
    }
    int64_t p = p0;
    for (; p + 2 <= p_end; p += 2) kSetKernels[1][rows - kStreamRows - 1](a, w, p, xq, i);
    if (p < p_end) kSetKernels[0][rows - kStreamRows - 1](a, w, p, xq, i);
  }
}

}  // namespace

void MatMulQ8VnniProducts(ThreadPool& pool, const MatMulArgs* a, int count,
                          const Q8Activations& xq) {
  // first[p]: the first column block of product p in the call's numbering.
  std::array<int64_t, kMaxQ8Products + 1> first{};
  std::array<VnniPanels, kMaxQ8Products> panels;
  int64_t work = 0;
  for (int p = 0; p < count; ++p) {
    first[p + 1] = first[p] + ColumnBlocks(a[p]);
    panels[p] = VnniPanelsOf(a[p].w_panels, a[p].m, a[p].k);
    work += a[p].n * a[p].m * a[p].k;
  }
  auto body = [&](int64_t c0, int64_t c1, int) {
    int p = 0;
    for (int64_t cb = c0; cb < c1; ++cb) {
      while (cb >= first[p + 1]) ++p;
      RunColumnBlock(a[p], panels[p], xq, cb - first[p]);
    }
  };
  // Each thread runs one contiguous home range of column blocks in order: its panels are
  // one stream, whose prefetch runs on from one column block into the next, where the
  // pool's guided claims started cold streams and prefetched past their ends into the
  // other thread's blocks (16-row step 1.08x, one row unchanged: docs/engine-measurements.md
  // "Head-major KV blocks"). A thread done with its home takes column blocks from the back
  // of the other's, so a thread on a slower core no longer holds up the call
  // (docs/engine-measurements.md, "Home ranges for the Q8 products").
  if (work < (1 << 16)) {
    body(0, first[count], 0);
  } else {
    pool.ParallelForHomes(first[count], body);
  }
}

void MatMulQ8Vnni(ThreadPool& pool, const MatMulArgs& a, const Q8Activations& xq,
                  PanelScratch& scratch) {
  MatMulArgs with_panels = a;
  with_panels.w_panels = CallPanels(pool, a, PanelKind::kVnni, scratch);
  MatMulQ8VnniProducts(pool, &with_panels, 1, xq);
}

}  // namespace kvfold::kernels::cpu
