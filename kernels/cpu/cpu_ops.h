// Kernels of the CPU backend on raw (host = device) pointers. The backend validates
// shapes and dtypes before calling these. Each has a plain reference version and an
// optimised one; both are batch-invariant (docs/engine.md).
#ifndef KVFOLD_KERNELS_CPU_CPU_OPS_H_
#define KVFOLD_KERNELS_CPU_CPU_OPS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace kvfold::kernels::cpu {

// Loads element i of a F32/F16/BF16 array as float.
float LoadAsF32(const void* data, DType dtype, int64_t i);
// Weight (j, t) of a Q8 matrix with k columns (backend.h kQ8).
float Q8At(const void* w, int64_t k, int64_t j, int64_t t);

// out [n, m] = x [n, k] @ w[m, k]^T (+ bias [m] when non-null). w: F32/F16/BF16/Q8.
struct MatMulArgs {
  const float* x;
  const void* w;
  DType w_dtype;
  const float* bias;
  float* out;
  int64_t n, m, k;
  // w as panels (below, of the kind MatMulPanels(*this) names) when the caller keeps
  // them, else nullptr (the call then lays them out in its scratch; a single row on the
  // Q8 AMX path reads the Q8 rows instead).
  const uint8_t* w_panels = nullptr;
};

// Panels: weights laid out for the panel paths of the matmul, per kQ8PanelRows (16)
// weight rows (m % 16 == 0). Three kinds, by path:
//   kAmx  (matmul_amx.cc, Q8): panel after panel, each the fp16 scales [blocks][16 rows]
//         (zero-padded to whole cache lines), then the codes [blocks][16 rows][kQ8Block],
//         as stored;
//   kVnni (matmul_q8_panels.cc, Q8 on AVX-512 VNNI without AMX): the codes of every
//         panel, [m / 16][blocks][kQ8Block / 4][16 rows][4], each code + 128 as uint8,
//         then the scales of every panel, [m / 16][blocks][16 rows] fp16 (fewer bytes
//         than Q8PanelBytes, which sizes both kinds);
//   kF32  (matmul_f32_panels.cc, F32 on AVX-512): panel after panel, the weights
//         [k][16 rows], so one 64-byte vector holds weight t of 16 output columns.
// The same numbers as the rows they come from, so results do not depend on which one a
// kernel reads.
enum class PanelKind { kNone, kAmx, kVnni, kF32 };
inline constexpr int kQ8PanelRows = 16;
inline size_t Q8PanelScaleBytes(int64_t k) {
  const size_t blocks = static_cast<size_t>((k + core::kQ8Block - 1) / core::kQ8Block);
  return (blocks * kQ8PanelRows * sizeof(uint16_t) + 63) / 64 * 64;
}
inline size_t Q8PanelBytes(int64_t m, int64_t k) {
  const size_t blocks = static_cast<size_t>((k + core::kQ8Block - 1) / core::kQ8Block);
  return static_cast<size_t>(m / kQ8PanelRows) *
         (Q8PanelScaleBytes(k) + blocks * kQ8PanelRows * core::kQ8Block);
}
// Writes the panels of `kind` (kAmx, kVnni) of Q8 weights w [m, k] (Q8PanelBytes(m, k)
// bytes), on `pool`'s threads when given.
void PackQ8Panels(ThreadPool* pool, PanelKind kind, const void* w, int64_t m, int64_t k,
                  uint8_t* panels);
// Writes the kF32 panels of F32 weights w [m, k] (m * k floats), on `pool`'s threads when given.
void PackF32Panels(ThreadPool* pool, const float* w, int64_t m, int64_t k, float* panels);
// Bytes of the panels of `kind` of a weight [m, k], and of the weight the panels come from.
size_t PanelBytes(PanelKind kind, int64_t m, int64_t k);
size_t PanelSourceBytes(PanelKind kind, int64_t m, int64_t k);
// Writes the panels of `kind` (not kNone) of the weights w [m, k] (PanelBytes bytes).
void PackPanels(ThreadPool* pool, PanelKind kind, const void* w, int64_t m, int64_t k,
                uint8_t* panels);
// The panels MatMulOptimized reads for a call like `a` (a function of the active path and
// the weights' dtype and shape, never of the number of rows): kNone when it reads the rows.
PanelKind MatMulPanels(const MatMulArgs& a);

// Q8 weights multiply int8 activations (docs/engine.md, "Q8 MatMul"): each row of x is
// quantized once per call, per block of kQ8Block: amax = max |x|, scale = amax / 127,
// code = clamp(nearbyint(x * (1 / scale)), -127, 127) (0 past k and for a zero block).
// Every path quantizes with the same float operations, so the codes and scales are
// identical on all of them; a row's codes depend only on that row (batch invariance).
struct Q8Activations {
  std::vector<int8_t> codes;    // [n, padded_k] (padded_k: k rounded up to 2 blocks)
  std::vector<float> scales;    // [n, padded_k / kQ8Block]
  // The VNNI kernels' terms that turn the product (w + 128) * x into w * x:
  std::vector<int32_t> offset;        // kLanes: [n, padded_k / 4], -128 * (sum of 4 codes)
  std::vector<int32_t> block_offset;  // kBlocks: [n, padded_k / kQ8Block], -128 * (block sum)
  int64_t padded_k = 0;
};
enum class Q8Offsets { kNone, kLanes, kBlocks };
// Quantizes `n` rows of `k` floats into xq (grows its vectors, never shrinks them), with
// the offsets `offsets` names. Rows are split over the pool when it pays.
void QuantizeActivationsQ8(ThreadPool* pool, const float* x, int64_t n, int64_t k,
                           Q8Offsets offsets, Q8Activations& xq);

// The panel paths' scratch: the Q8 AMX path's activations in tile layout (matmul_amx.cc),
// and the panels of weights without kept ones.
struct PanelScratch {
  std::vector<int8_t> packed;
  std::vector<float> scales;
  std::vector<uint8_t> panels;
};

// Scratch of the matmul kernels; grows to the largest call, then allocation-free.
struct MatMulScratch {
  Q8Activations q8;
  PanelScratch panels;
};

void MatMulReference(const MatMulArgs& a, MatMulScratch& scratch);
// The fastest path the CPU has (isa.h): AVX-512 (+ VNNI for Q8), AVX2 + FMA + F16C, or a
// portable blocked kernel with the same per-element accumulation order as the AVX2 one.
void MatMulOptimized(ThreadPool& pool, const MatMulArgs& a, MatMulScratch& scratch);
// MatMulOptimized of `count` products of one x (a[p].x, n and k the same for every p), each
// with its bits. Q8 products on the VNNI panels path with kept panels (a[p].w_panels), at
// most kMaxQ8Products of them, share one quantization of x and one pass of the pool over
// all their column blocks; any other call runs the products one by one.
inline constexpr int kMaxQ8Products = 4;
void MatMulOptimizedProducts(ThreadPool& pool, const MatMulArgs* a, int count,
                             MatMulScratch& scratch);
bool CpuHasAvx2Fma();

struct AttentionArgs {
  const float* q;        // [n, num_heads * head_dim]
  const float* k_cache;  // [num_blocks, num_kv_heads, block_size, head_dim] (FloatKvIndex);
                         // null for an fp16 cache
  const float* v_cache;
  const AttnRow* rows;   // [n]
  const int32_t* block_tables;
  const float* rope;     // [rope_rows, head_dim]
  int64_t rope_rows;
  AttentionShape shape;
  float* out;            // [n, num_heads * head_dim]
  int64_t n;
  // An fp16 cache (IEEE half bits, same layout) instead of k_cache / v_cache. Every entry
  // is widened to F32 exactly as it is read, so a row equals the F32 kernel's row on a
  // cache holding the widened values.
  const uint16_t* k_half = nullptr;
  const uint16_t* v_half = nullptr;
};

// A slice of the keys (Backend::AttentionPart): key indices [key_begin, key_end) of every
// row, both multiples of kAttentionPartKeys (key_end may also be past every row's keys).
// The online softmax state of each (row, head) is carried in `state`: [n, num_heads,
// head_dim + 2] F32 (m, l, acc), fresh when key_begin is 0. A row block whose keys end
// inside the slice is normalised into out.
struct AttentionPart {
  int64_t key_begin = 0;
  int64_t key_end = 0;
  float* state = nullptr;
};

// INT8 KV (backend.h KvCacheI8). Entries of a row's own block are read F32 from its page,
// all others dequantized from codes * scale (exactly kernels/quant's DequantizeKeys /
// DequantizeValues), then keys are rotated like the F32 path.
struct AttentionArgsI8 {
  const float* q;         // [n, num_heads * head_dim]
  const int8_t* k_codes;  // [num_blocks, block_size, kv_dim]
  const int8_t* v_codes;
  const uint16_t* k_scales;  // [num_blocks, kv_dim] fp16
  const uint16_t* v_scales;  // [num_blocks, block_size, v_groups] fp16
  const float* k_pages;      // [num_pages, block_size, kv_dim]
  const float* v_pages;
  int value_group;
  int v_groups;
  const AttnRow* rows;       // [n]
  const AttnOwnBlock* own;   // [n]
  const int32_t* block_tables;
  const float* rope;  // [rope_rows, head_dim]
  int64_t rope_rows;
  AttentionShape shape;
  float* out;  // [n, num_heads * head_dim]
  int64_t n;
};

// Plain references (one thread, two-pass softmax per row). Scratch: scores, grown to the
// longest context seen.
void AttentionReference(const AttentionArgs& a, std::vector<float>& scratch);
void AttentionInt8Reference(const AttentionArgsI8& a, std::vector<float>& scratch);

// The tiled kernels (attention_tiled.cc): one planner and one tile loop for both caches;
// the INT8 one dequantizes each tile's entries where the F32 one reads them. The F32 and
// INT8 results of a row are bit-identical when the F32 cache holds the dequantized
// entries (and the row's own block from its page).
//
// Row blocks: consecutive rows of a call with the same key layout
// (AttnRow::SameKeyLayout), at most kAttnMaxBlockRows of them; a task is (row block, KV
// head), and it locates, dequantizes and rotates each tile of keys once for all its rows.
inline constexpr int kAttnMaxBlockRows = 32;
struct AttnRowBlock {
  int64_t first_row;
  int num_rows;
};
struct AttentionScratch {
  std::vector<std::vector<float>> per_thread;  // tiles, online-softmax state, key scales
  std::vector<std::vector<int32_t>> per_thread_groups;  // INT8 heads tasks' value groups
  std::vector<AttnRowBlock> blocks;
};
// part: only a slice of the keys (nullptr: all of them).
void AttentionOptimized(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch,
                        const AttentionPart* part = nullptr);
void AttentionInt8Optimized(ThreadPool& pool, const AttentionArgsI8& a,
                            AttentionScratch& scratch);

// StoreKvInt8's quantization of one block: entries [0, count) of a page into the block's
// codes and fp16 scales (QuantizeKeys with group_size = count, QuantizeValues with
// value_group, fp16_scales). scratch: max(kv_dim, count * v_groups) floats.
void SealBlockInt8(const float* k_page, const float* v_page, int count, int kv_dim, int value_group,
                   int8_t* k_codes, uint16_t* k_scales, int8_t* v_codes, uint16_t* v_scales,
                   float* scratch);

// StoreKv into an fp16 cache ([num_blocks, num_kv_heads, block_size, head_dim],
// FloatKvIndex): rows k, v [n, num_kv_heads * head_dim] F32 to slots[i] of k_cache,
// v_cache, each value rounded to the nearest fp16 (ties to even; F16C or AVX-512 where
// the active ISA has it, else Fp32ToFp16: the same bits).
void StoreKvHalf(const float* k, const float* v, const int32_t* slots, int64_t n,
                 int64_t num_kv_heads, int64_t block_size, int64_t head_dim, uint16_t* k_cache,
                 uint16_t* v_cache);
// The same into an F32 cache: each value copied.
void StoreKvF32(const float* k, const float* v, const int32_t* slots, int64_t n,
                int64_t num_kv_heads, int64_t block_size, int64_t head_dim, float* k_cache,
                float* v_cache);

// Rotates x (head_dim floats) by row `cs` of the rope table (cos | sin halves).
inline void RotateHalf(const float* x, const float* cs, int head_dim, float* out) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cs[i], s = cs[half + i];
    const float a = x[i], b = x[half + i];
    const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
    out[i] = ac - bs;
    out[half + i] = bc + as;
  }
}

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_CPU_OPS_H_
