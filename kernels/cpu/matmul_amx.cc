// AMX int8 path of the Q8 matmul (matmul_tiles.h, "AMX"). One tile multiply
// (TDPBSSD, signed x signed bytes) gives the exact integer dot of one block (32 codes)
// for 16 output columns x up to 16 rows of x at once: A = 16 weight rows' codes of the
// block, B = the rows' codes of the block packed four bytes per row side by side (the
// tile layout TDPBSSD reads), C = 16 x 16 int32.
// Per output, in block order: acc = fma(float(block dot), w_scale * x_scale, acc); the
// sum is acc (+ bias). A row group of one row (decode) computes the same block dots with
// AVX-512 VNNI instead (RowVnni16 on panels, RowVnni8 on the Q8 rows as stored) and the
// same float operations. Every output's operations depend only on its row and column, so
// a row alone and a row in a batch give identical bits.
//
// The tiles read the weights as panels (cpu_ops.h Q8Panels): per 16 rows, every block's
// 16 scales and then every block's 16 x 32 codes, one contiguous stream. Read in place
// from the Q8 rows, a tile load gathered 16 pieces of 32 bytes at the row stride, and a
// 16-row q8 decode step took 24-32 ms instead of 21-22 ms at 1 thread (docs/engine-measurements.md,
// "AMX panels").
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/matmul_tiles.h"

namespace kvfold::kernels::cpu {
namespace {

#define KVFOLD_AMX \
  __attribute__((target( \
      "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")))

constexpr int kGroup = 16;  // output columns and rows of x per tile
// Bytes of one block's A tile (16 weight rows' codes) and of its B tile (16 rows of x).
constexpr int64_t kTileBytes = int64_t{kQ8Block} * kGroup;
static_assert(kGroup == kQ8PanelRows, "a panel feeds one A tile per block");

// The tile registers: 0 = C (int32 block dots), 1 = A (weights), 2 = B (x codes).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Tiles 0-3: C (16 columns of w x 16 rows of x, int32) of four consecutive blocks; 4, 5:
// A (16 weight rows x 32 codes); 6, 7: B (8 groups of 4 codes x 16 rows of x). Four C
// tiles let the tile multiplies of four blocks run back to back, then their dots are
// scaled (with one C tile, each block waited for its multiply and store before the next
// began: the 16-row matmul ran at ~10 GB/s of weights from L2). A constant in memory: GCC
// dropped the stores of a local configuration as dead (it does not see LDTILECFG read
// them).
constexpr int kBlocksPerStep = 4;
constexpr TileConfig kTileConfig = {1,
                                    0,
                                    {},
                                    {kGroup * 4, kGroup * 4, kGroup * 4, kGroup * 4, kQ8Block,
                                     kQ8Block, kGroup * 4, kGroup * 4},
                                    {kGroup, kGroup, kGroup, kGroup, kGroup, kGroup, kQ8Block / 4,
                                     kQ8Block / 4}};
KVFOLD_AMX void ConfigureTiles() { _tile_loadconfig(&kTileConfig); }

KVFOLD_AMX void ReleaseTiles() { _tile_release(); }

// Weight panels are prefetched 16 KiB ahead, hinted for the outer caches (T2). A software
// prefetch holds one of the core's few L1 fill buffers until its line arrives from
// memory. The one-row kernel (vector loads, many misses in flight) asks for every line;
// the tile loop asks for one line per 4 KiB page: with every line asked for, the
// prefetches stalled the loop once the fill buffers were all taken and the tiles' own
// loads from L2 queued behind them (~5 GB/s per core). One line per page starts the L2's
// stream prefetcher on that page, which fetches the page's other lines without fill
// buffers (docs/engine-measurements.md, "Panel prefetch": the 16-row q8 decode step ~15 % shorter
// at 2 threads; the one-row kernel was slower that way, so it keeps every line).
constexpr int64_t kPanelPrefetchBlocks = 32;
constexpr uintptr_t kPageBytes = 4096;

// The panel codes kPanelPrefetchBlocks blocks ahead of `at` (past the panel's end: the next
// panel's lines, as panels are contiguous, or lines nobody reads).
inline const char* PanelAhead(const int8_t* at) {
  return reinterpret_cast<const char*>(at + kPanelPrefetchBlocks * kTileBytes);
}

// Every line of the kBlocksPerStep blocks at PanelAhead(at).
KVFOLD_AMX inline void PrefetchPanelLines(const int8_t* at) {
  const char* ahead = PanelAhead(at);
  for (int l = 0; l < kBlocksPerStep * kTileBytes / 64; ++l) {
    _mm_prefetch(ahead + l * 64, _MM_HINT_T2);
  }
}

// The line PanelAhead(at) when it lies in the first kBlocksPerStep * kTileBytes bytes of
// its page: steps are that long, so one line per page.
KVFOLD_AMX inline void PrefetchPanelPage(const int8_t* at) {
  const char* ahead = PanelAhead(at);
  if ((reinterpret_cast<uintptr_t>(ahead) & (kPageBytes - 1)) < kBlocksPerStep * kTileBytes) {
    _mm_prefetch(ahead, _MM_HINT_T2);
  }
}

// out[i0 .. i0 + rows, j0 .. j0 + 16] over all blocks (kTileConfig). `panel` is the panel
// of columns j0.., `packed` holds the B tiles of this row group ([blocks][8][16 x 4
// bytes]), `xs` its x scales ([blocks][16], 0 past rows). Accumulators: one vector per
// output column, lanes = rows of x.
KVFOLD_AMX void Tile(const MatMulArgs& a, const uint8_t* panel, const int8_t* packed,
                     const float* xs, int64_t i0, int rows, int64_t j0) {
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  const uint16_t* w_scales = reinterpret_cast<const uint16_t*>(panel);
  const int8_t* codes = reinterpret_cast<const int8_t*>(panel + Q8PanelScaleBytes(a.k));
  __m512 acc[kGroup];
  for (int o = 0; o < kGroup; ++o) acc[o] = _mm512_setzero_ps();
  alignas(64) int32_t c[kBlocksPerStep * kGroup * kGroup];
  alignas(64) float ws[kBlocksPerStep * kGroup];  // [block in step][o]
  for (int64_t b = 0; b < blocks; b += kBlocksPerStep) {
    const int steps = static_cast<int>(std::min<int64_t>(kBlocksPerStep, blocks - b));
    const int8_t* a_at = codes + b * kTileBytes;
    PrefetchPanelPage(a_at);
    const int8_t* b_at = packed + b * kTileBytes;
    // Tile register numbers are immediates: the four blocks spelled out.
    _tile_zero(0);
    _tile_loadd(4, a_at, kQ8Block);
    _tile_loadd(6, b_at, kGroup * 4);
    _tile_dpbssd(0, 4, 6);
    if (steps > 1) {
      _tile_zero(1);
      _tile_loadd(5, a_at + kTileBytes, kQ8Block);
      _tile_loadd(7, b_at + kTileBytes, kGroup * 4);
      _tile_dpbssd(1, 5, 7);
    }
    if (steps > 2) {
      _tile_zero(2);
      _tile_loadd(4, a_at + 2 * kTileBytes, kQ8Block);
      _tile_loadd(6, b_at + 2 * kTileBytes, kGroup * 4);
      _tile_dpbssd(2, 4, 6);
    }
    if (steps > 3) {
      _tile_zero(3);
      _tile_loadd(5, a_at + 3 * kTileBytes, kQ8Block);
      _tile_loadd(7, b_at + 3 * kTileBytes, kGroup * 4);
      _tile_dpbssd(3, 5, 7);
    }
    for (int i = 0; i < steps; ++i) {
      _mm512_store_ps(ws + i * kGroup,
                      _mm512_cvtph_ps(_mm256_loadu_si256(
                          reinterpret_cast<const __m256i*>(w_scales + (b + i) * kGroup))));
    }
    _tile_stored(0, c, kGroup * 4);
    if (steps > 1) _tile_stored(1, c + kGroup * kGroup, kGroup * 4);
    if (steps > 2) _tile_stored(2, c + 2 * kGroup * kGroup, kGroup * 4);
    if (steps > 3) _tile_stored(3, c + 3 * kGroup * kGroup, kGroup * 4);
    for (int i = 0; i < steps; ++i) {  // block order, as in the single-row path
      const int32_t* ci = c + i * kGroup * kGroup;
      const __m512 xv = _mm512_loadu_ps(xs + (b + i) * kGroup);
      for (int o = 0; o < kGroup; ++o) {
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(ci + o * kGroup));
        const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(ws[i * kGroup + o]), xv);
        acc[o] = _mm512_fmadd_ps(dot, scale, acc[o]);
      }
    }
  }
  alignas(64) float t[kGroup * kGroup];  // [o][row]
  for (int o = 0; o < kGroup; ++o) _mm512_store_ps(t + o * kGroup, acc[o]);
  for (int r = 0; r < rows; ++r) {
    float* out = a.out + (i0 + r) * a.m + j0;
    for (int o = 0; o < kGroup; ++o) {
      float s = t[o * kGroup + r];
      if (a.bias) s += a.bias[j0 + o];
      out[o] = s;
    }
  }
}

// The integer tree of the VNNI kernels: eight vectors d[c] of 16 int32 lanes, each two
// halves of 8 lanes (lanes 0-7 and 8-15), to the 16 half sums, chunk by chunk (128 bits):
// [d0-d3 low halves, d0-d3 high halves, d4-d7 low, d4-d7 high]. Exact in any order.
KVFOLD_AMX inline __m512i HalfSums(const __m512i* d) {
  // Per 128-bit chunk: [d 2c, 2c + 1 summed over each chunk's 4 lanes, interleaved].
  __m512i p[4];
  for (int c = 0; c < 4; ++c) {
    p[c] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * c], d[2 * c + 1]),
                            _mm512_unpackhi_epi32(d[2 * c], d[2 * c + 1]));
  }
  const __m512i q0 = _mm512_add_epi32(_mm512_unpacklo_epi64(p[0], p[1]), _mm512_unpackhi_epi64(p[0], p[1]));
  const __m512i q1 = _mm512_add_epi32(_mm512_unpacklo_epi64(p[2], p[3]), _mm512_unpackhi_epi64(p[2], p[3]));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(q0, q1, 0x88), _mm512_shuffle_i32x4(q0, q1, 0xDD));
}

// One row of x, 8 output columns, on AVX-512 VNNI (no tiles: a tile multiply would do 16
// times the work a single row needs): the same exact block dots, then the same float
// operations per output as Tile. Two blocks per step: vpdpbusd gives 8 integer lanes per
// block and output (weights biased by 128, Q8Activations::offset), an integer tree (exact,
// any order) sums each block's 8 lanes, then acc = fma(float(dot), w_scale * x_scale, acc)
// for the even block and then the odd one.
KVFOLD_AMX void RowVnni8(const MatMulArgs& a, const Q8Activations& xq, int64_t i, int64_t j0) {
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  const int64_t row_bytes = static_cast<int64_t>(Q8RowBytes(a.k));
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + j0 * row_bytes;
  const uint8_t* codes = w + blocks * 2;
  const int8_t* xc = xq.codes.data() + i * xq.padded_k;
  const int32_t* xo = xq.offset.data() + i * (xq.padded_k / 4);
  const float* xs = xq.scales.data() + i * (xq.padded_k / kQ8Block);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const int rb = static_cast<int>(row_bytes);
  const __m256i rows = _mm256_setr_epi32(0, rb, 2 * rb, 3 * rb, 4 * rb, 5 * rb, 6 * rb, 7 * rb);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; b += 2) {
    // The next 8 rows (contiguous after these) into L2, 9 lines per pair of blocks.
    const char* pf = reinterpret_cast<const char*>(w) + 8 * row_bytes + b / 2 * 9 * 64;
    for (int l = 0; l < 9; ++l) _mm_prefetch(pf + l * 64, _MM_HINT_T1);
    const bool odd = b + 1 < blocks;
    const __mmask64 wmask = odd ? ~0ull : 0xFFFFFFFFull;
    const __m512i xv = _mm512_loadu_si512(xc + b * kQ8Block);
    const __m512i xoff = _mm512_loadu_si512(xo + b * (kQ8Block / 4));
    __m512i d[8];
    for (int c = 0; c < 8; ++c) {
      const __m512i wv =
          _mm512_xor_si512(_mm512_maskz_loadu_epi8(wmask, codes + c * row_bytes + b * kQ8Block), bias);
      d[c] = _mm512_dpbusd_epi32(xoff, wv, xv);
    }
    // Chunks: [out 0-3 even block, out 0-3 odd, out 4-7 even, out 4-7 odd].
    const __m512i sums = HalfSums(d);
    const __m256 even = _mm256_cvtepi32_ps(_mm512_castsi512_si256(_mm512_shuffle_i32x4(sums, sums, 0x08)));
    // Both blocks' fp16 weight scales of the 8 rows in one 32-bit gather.
    const __m256i sc = _mm256_i32gather_epi32(reinterpret_cast<const int*>(w + 2 * b), rows, 1);
    const __m256 ws_even = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(sc));
    acc = _mm256_fmadd_ps(even, _mm256_mul_ps(ws_even, _mm256_set1_ps(xs[b])), acc);
    if (odd) {
      const __m256 odd_dots =
          _mm256_cvtepi32_ps(_mm512_castsi512_si256(_mm512_shuffle_i32x4(sums, sums, 0x0D)));
      const __m256 ws_odd = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(sc, 16)));
      acc = _mm256_fmadd_ps(odd_dots, _mm256_mul_ps(ws_odd, _mm256_set1_ps(xs[b + 1])), acc);
    }
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, acc);
  float* out = a.out + i * a.m + j0;
  for (int o = 0; o < 8; ++o) out[o] = a.bias ? t[o] + a.bias[j0 + o] : t[o];
}

// One row of x, the 16 output columns of a panel, on AVX-512 VNNI: RowVnni8's exact block
// dots and float operations, from the panel. One block per step: vpdpbusd of x's block
// (both halves) with two columns' codes gives 8 lanes per column, HalfSums sums them
// (columns in the order [0 2 4 6 | 1 3 5 7 | 8 10 12 14 | 9 11 13 15]: one permute puts
// them in column order), then acc = fma(float(dot), w_scale * x_scale, acc) per column.
KVFOLD_AMX void RowVnni16(const MatMulArgs& a, const uint8_t* panel, const Q8Activations& xq,
                          int64_t i, int64_t j0) {
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  const uint16_t* w_scales = reinterpret_cast<const uint16_t*>(panel);
  const int8_t* codes = reinterpret_cast<const int8_t*>(panel + Q8PanelScaleBytes(a.k));
  const int8_t* xc = xq.codes.data() + i * xq.padded_k;
  const int32_t* xo = xq.offset.data() + i * (xq.padded_k / 4);
  const float* xs = xq.scales.data() + i * (xq.padded_k / kQ8Block);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* w = codes + b * kTileBytes;
    if ((b & 3) == 0) PrefetchPanelLines(w);
    const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + b * kQ8Block)));
    const __m512i xoff = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo + b * (kQ8Block / 4))));
    __m512i d[8];
    for (int c = 0; c < 8; ++c) {  // columns 2c (lanes 0-7) and 2c + 1 (lanes 8-15)
      const __m512i wv = _mm512_xor_si512(_mm512_loadu_si512(w + c * 2 * kQ8Block), bias);
      d[c] = _mm512_dpbusd_epi32(xoff, wv, xv);
    }
    const __m512 dots = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(order, HalfSums(d)));
    const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_scales + b * kGroup)));
    acc = _mm512_fmadd_ps(dots, _mm512_mul_ps(ws, _mm512_set1_ps(xs[b])), acc);
  }
  alignas(64) float t[kGroup];
  _mm512_store_ps(t, acc);
  float* out = a.out + i * a.m + j0;
  for (int o = 0; o < kGroup; ++o) out[o] = a.bias ? t[o] + a.bias[j0 + o] : t[o];
}

// B tiles and scales of every row group: packed[g][b][k4][r][4] = codes of row 16 g + r,
// bytes 32 b + 4 k4 .. + 3 (zeros past n); xs[g][b][r]. One gather per (block, k4): the
// 16 rows' four bytes (was a scalar store per row, block and k4).
KVFOLD_AMX void Pack(const Q8Activations& xq, int64_t n, int64_t blocks, PanelScratch& s) {
  const int64_t groups = (n + kGroup - 1) / kGroup;
  if (s.packed.size() < static_cast<size_t>(groups * blocks * kTileBytes)) {
    s.packed.resize(groups * blocks * kTileBytes);
  }
  if (s.scales.size() < static_cast<size_t>(groups * blocks * kGroup)) {
    s.scales.resize(groups * blocks * kGroup);
  }
  const int64_t xb = xq.padded_k / kQ8Block;
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i row_bytes = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(static_cast<int32_t>(xq.padded_k)));
  const __m512i scale_at = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(static_cast<int32_t>(xb)));
  for (int64_t g = 0; g < groups; ++g) {
    const int rows = static_cast<int>(std::min<int64_t>(kGroup, n - g * kGroup));
    const __mmask16 live = static_cast<__mmask16>((1u << rows) - 1);
    const int8_t* codes = xq.codes.data() + g * kGroup * xq.padded_k;
    const float* scales = xq.scales.data() + g * kGroup * xb;
    for (int64_t b = 0; b < blocks; ++b) {
      int8_t* dst = s.packed.data() + (g * blocks + b) * kTileBytes;
      for (int k4 = 0; k4 < kQ8Block / 4; ++k4) {
        const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, row_bytes,
                                                      codes + b * kQ8Block + 4 * k4, 1);
        _mm512_storeu_si512(dst + k4 * kGroup * 4, v);
      }
      _mm512_storeu_ps(s.scales.data() + (g * blocks + b) * kGroup,
                       _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, scale_at, scales + b, 4));
    }
  }
}

}  // namespace

void MatMulQ8Amx(ThreadPool& pool, const MatMulArgs& a, const Q8Activations& xq,
                 PanelScratch& scratch) {
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  // B tiles only for calls that run tiles: a single row (decode) takes RowVnni16/8.
  if (a.n > 1) Pack(xq, a.n, blocks, scratch);
  const int64_t groups = (a.n + kGroup - 1) / kGroup;
  // Weights without panels of their own (not adopted by the backend) are laid out per
  // call; a call of one row reads the Q8 rows only.
  const uint8_t* panels =
      a.w_panels != nullptr || a.n > 1 ? CallPanels(pool, a, PanelKind::kAmx, scratch) : nullptr;
  const size_t panel_bytes = Q8PanelBytes(kGroup, a.k);
  // Threads take blocks of 64 output columns; all row groups pass over a block while its
  // weights sit in L2, so each weight is read from memory once per call.
  constexpr int64_t kColBlock = 4 * kGroup;
  const int64_t num_col_blocks = (a.m + kColBlock - 1) / kColBlock;
  auto body = [&](int64_t c0, int64_t c1, int) {
    bool configured = false;
    for (int64_t cb = c0; cb < c1; ++cb) {
      const int64_t j_end = std::min(a.m, (cb + 1) * kColBlock);
      for (int64_t g = 0; g < groups; ++g) {
        const int rows = static_cast<int>(std::min<int64_t>(kGroup, a.n - g * kGroup));
        for (int64_t j = cb * kColBlock; j < j_end; j += kGroup) {
          if (rows == 1 && panels != nullptr) {
            RowVnni16(a, panels + (j / kGroup) * panel_bytes, xq, g * kGroup, j);
            continue;
          }
          if (rows == 1) {
            RowVnni8(a, xq, g * kGroup, j);
            RowVnni8(a, xq, g * kGroup, j + 8);
            continue;
          }
          if (!configured) {
            ConfigureTiles();
            configured = true;
          }
          Tile(a, panels + (j / kGroup) * panel_bytes,
               scratch.packed.data() + g * blocks * kTileBytes,
               scratch.scales.data() + g * blocks * kGroup, g * kGroup, rows, j);
        }
      }
    }
    if (configured) ReleaseTiles();
  };
  if (a.n * a.m * a.k < (1 << 16)) {
    body(0, num_col_blocks, 0);
  } else {
    pool.ParallelFor(num_col_blocks, 1, body);
  }
}

}  // namespace kvfold::kernels::cpu
