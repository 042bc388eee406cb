// AMX int8 path of the Q8 matmul (matmul_tiles.h, "AMX"). One tile multiply
// (TDPBSSD, signed x signed bytes) gives the exact integer dot of one block (32 codes)
// for 16 output columns x up to 16 rows of x at once: A = 16 weight rows' codes of the
// block (read in place, stride = the Q8 row), B = the rows' codes of the block packed
// four bytes per row side by side (the tile layout TDPBSSD reads), C = 16 x 16 int32.
// Per output, in block order: acc = fma(float(block dot), w_scale * x_scale, acc); the
// sum is acc (+ bias). A row group of one row (decode) computes the same block dots with
// AVX-512 VNNI instead (RowVnni8) and the same float operations. Every output's operations
// depend only on its row and column, so a row alone and a row in a batch give identical
// bits.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_tiles.h"

namespace kvfold::kernels::cpu {
namespace {

#define KVFOLD_AMX \
  __attribute__((target( \
      "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,amx-tile,amx-int8")))

constexpr int kGroup = 16;        // output columns and rows of x per tile
constexpr int kChunkBlocks = 64;  // weight scales converted per chunk of blocks

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

// The F32 scales of 16 weight rows, blocks [b0, b0 + nb): ws[o][b - b0].
KVFOLD_AMX inline void ConvertScales(const uint8_t* w, int64_t row_bytes, int64_t b0, int64_t nb,
                                     float* ws) {
  for (int o = 0; o < kGroup; ++o) {
    const uint16_t* half = reinterpret_cast<const uint16_t*>(w + o * row_bytes) + b0;
    for (int64_t b = 0; b < nb; b += 16) {
      const __mmask16 mask = static_cast<__mmask16>(nb - b >= 16 ? 0xFFFF : (1u << (nb - b)) - 1);
      _mm512_storeu_ps(ws + o * kChunkBlocks + b,
                       _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, half + b)));
    }
  }
}

// The next 16 weight rows (contiguous after this tile's), a share per block into L2, so
// the next tile finds them there (Q8 rows are short: the hardware prefetcher does not ramp
// up on them). Past the matrix's end this only asks for lines nobody reads.
KVFOLD_AMX inline void PrefetchNextTile(const uint8_t* w, int64_t row_bytes, int64_t b,
                                        int64_t blocks) {
  const int64_t lines = (kGroup * row_bytes + 63) / 64;
  const int64_t per_block = (lines + blocks - 1) / blocks;
  const char* next = reinterpret_cast<const char*>(w + kGroup * row_bytes);
  for (int64_t l = b * per_block; l < std::min(lines, (b + 1) * per_block); ++l) {
    _mm_prefetch(next + l * 64, _MM_HINT_T1);
  }
}

// This tile's codes four blocks ahead into L1, one line per row every other block.
KVFOLD_AMX inline void PrefetchAhead(const int8_t* codes, int64_t row_bytes, int64_t b,
                                     int64_t blocks) {
  if ((b & 1) != 0 || b + 4 >= blocks) return;
  for (int o = 0; o < kGroup; ++o) {
    _mm_prefetch(reinterpret_cast<const char*>(codes + o * row_bytes + (b + 4) * kQ8Block),
                 _MM_HINT_T0);
  }
}

// out[i0 .. i0 + rows, j0 .. j0 + 16] over all blocks (kTileConfig). `packed` holds the B
// tiles of this row group ([blocks][8][16 x 4 bytes]), `xs` its x scales ([blocks][16],
// 0 past rows). Accumulators: one vector per output column, lanes = rows of x.
KVFOLD_AMX void Tile(const MatMulArgs& a, const int8_t* packed, const float* xs, int64_t i0,
                     int rows, int64_t j0) {
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  const int64_t row_bytes = static_cast<int64_t>(Q8RowBytes(a.k));
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + j0 * row_bytes;
  const int8_t* codes = reinterpret_cast<const int8_t*>(w + blocks * 2);
  __m512 acc[kGroup];
  for (int o = 0; o < kGroup; ++o) acc[o] = _mm512_setzero_ps();
  alignas(64) int32_t c[kBlocksPerStep * kGroup * kGroup];
  alignas(64) float ws[kGroup * kChunkBlocks];  // [o][block in chunk]
  for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const int64_t nb = std::min<int64_t>(kChunkBlocks, blocks - b0);
    ConvertScales(w, row_bytes, b0, nb, ws);
    for (int64_t bb = 0; bb < nb; bb += kBlocksPerStep) {
      const int64_t b = b0 + bb;
      const int steps = static_cast<int>(std::min<int64_t>(kBlocksPerStep, nb - bb));
      for (int i = 0; i < steps; ++i) {
        PrefetchNextTile(w, row_bytes, b + i, blocks);
        PrefetchAhead(codes, row_bytes, b + i, blocks);
      }
      const int8_t* a_at = codes + b * kQ8Block;
      const int8_t* b_at = packed + b * (kQ8Block * kGroup);
      constexpr int64_t kB = kQ8Block * kGroup;
      // Tile register numbers are immediates: the four blocks spelled out.
      _tile_zero(0);
      _tile_loadd(4, a_at, row_bytes);
      _tile_loadd(6, b_at, kGroup * 4);
      _tile_dpbssd(0, 4, 6);
      if (steps > 1) {
        _tile_zero(1);
        _tile_loadd(5, a_at + kQ8Block, row_bytes);
        _tile_loadd(7, b_at + kB, kGroup * 4);
        _tile_dpbssd(1, 5, 7);
      }
      if (steps > 2) {
        _tile_zero(2);
        _tile_loadd(4, a_at + 2 * kQ8Block, row_bytes);
        _tile_loadd(6, b_at + 2 * kB, kGroup * 4);
        _tile_dpbssd(2, 4, 6);
      }
      if (steps > 3) {
        _tile_zero(3);
        _tile_loadd(5, a_at + 3 * kQ8Block, row_bytes);
        _tile_loadd(7, b_at + 3 * kB, kGroup * 4);
        _tile_dpbssd(3, 5, 7);
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
          const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(ws[o * kChunkBlocks + bb + i]), xv);
          acc[o] = _mm512_fmadd_ps(dot, scale, acc[o]);
        }
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
    // Per 128-bit chunk: [out 0..3 (or 4..7) summed over the chunk's 4 lanes].
    __m512i p[4];
    for (int c = 0; c < 4; ++c) {
      p[c] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * c], d[2 * c + 1]),
                              _mm512_unpackhi_epi32(d[2 * c], d[2 * c + 1]));
    }
    const __m512i q0 = _mm512_add_epi32(_mm512_unpacklo_epi64(p[0], p[1]), _mm512_unpackhi_epi64(p[0], p[1]));
    const __m512i q1 = _mm512_add_epi32(_mm512_unpacklo_epi64(p[2], p[3]), _mm512_unpackhi_epi64(p[2], p[3]));
    // Chunks: [out 0-3 even block, out 0-3 odd, out 4-7 even, out 4-7 odd].
    const __m512i sums = _mm512_add_epi32(_mm512_shuffle_i32x4(q0, q1, 0x88),
                                          _mm512_shuffle_i32x4(q0, q1, 0xDD));
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

// B tiles and scales of every row group: packed[g][b][k4][r][4] = codes of row 16 g + r,
// bytes 32 b + 4 k4 .. + 3 (zeros past n); xs[g][b][r].
void Pack(const Q8Activations& xq, int64_t n, int64_t blocks, AmxScratch& s) {
  const int64_t groups = (n + kGroup - 1) / kGroup;
  const size_t tile_bytes = static_cast<size_t>(kQ8Block) * kGroup;
  if (s.packed.size() < groups * blocks * tile_bytes) s.packed.resize(groups * blocks * tile_bytes);
  if (s.scales.size() < static_cast<size_t>(groups * blocks * kGroup)) {
    s.scales.resize(groups * blocks * kGroup);
  }
  const int64_t xb = xq.padded_k / kQ8Block;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t* dst = reinterpret_cast<int32_t*>(s.packed.data() + (g * blocks + b) * tile_bytes);
      float* xs = s.scales.data() + (g * blocks + b) * kGroup;
      for (int r = 0; r < kGroup; ++r) {
        const int64_t row = g * kGroup + r;
        if (row >= n) {
          for (int k4 = 0; k4 < kQ8Block / 4; ++k4) dst[k4 * kGroup + r] = 0;
          xs[r] = 0.0f;
          continue;
        }
        int32_t src[kQ8Block / 4];
        std::memcpy(src, xq.codes.data() + row * xq.padded_k + b * kQ8Block, kQ8Block);
        for (int k4 = 0; k4 < kQ8Block / 4; ++k4) dst[k4 * kGroup + r] = src[k4];
        xs[r] = xq.scales[row * xb + b];
      }
    }
  }
}

}  // namespace

bool Q8AmxFits(const MatMulArgs& a) { return a.m % kGroup == 0; }

void MatMulQ8Amx(ThreadPool& pool, const MatMulArgs& a, const Q8Activations& xq,
                 AmxScratch& scratch) {
  const int64_t blocks = (a.k + kQ8Block - 1) / kQ8Block;
  Pack(xq, a.n, blocks, scratch);
  const int64_t groups = (a.n + kGroup - 1) / kGroup;
  const size_t tile_bytes = static_cast<size_t>(kQ8Block) * kGroup;
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
          if (rows == 1) {
            RowVnni8(a, xq, g * kGroup, j);
            RowVnni8(a, xq, g * kGroup, j + 8);
            continue;
          }
          if (!configured) {
            ConfigureTiles();
            configured = true;
          }
          Tile(a, scratch.packed.data() + g * blocks * tile_bytes,
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
