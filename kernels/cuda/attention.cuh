// Paged GQA attention over [prefix | main] with RoPE applied to the UN-ROTATED cached keys
// by each entry's position (docs/contracts.md), for decode and prefill alike.
//
// Every query row is a kernels::AttnRow (kernels/attn_rows.h, the record the engine's
// batch planner writes and the CPU kernels read): the visible prefix entries [0,
// prefix_visible) at positions prefix_pos_base + j * prefix_pos_stride, then the visible
// main entries [main_lo, main_hi) at positions main_pos_lo + (j - main_lo). Prefix entry
// j lives at physical slot j of the prefix table; logical main entry j at physical slot
// main_front + j of the main table; slot s is in block table[s / block_size]
// at offset s % block_size. So one kernel covers: causal decode/prefill (hi = own index + 1),
// sliding and sink windows (lo > 0), and memory expansion (prefix_visible = all memory
// rows, hi = lo = 0: bidirectional among the memory, nothing else).
//
// Algorithm (flash-decoding): grid (row, kv_head, split). A block owns one row, one KV head
// and all num_heads / num_kv_heads query heads of its group (K/V are read once per group),
// and a contiguous range of that row's keys. Keys go through shared-memory tiles of 32: all
// threads stage a tile's keys (rotated once) and values as F32 with 16-byte loads, one
// thread per (key, query head) scores it, and an online softmax folds it in; when a row is
// split, per-split (max, sum, acc) go to the workspace and a second kernel combines them.
// The split count depends only on the number of rows, so decode of one long row is spread
// over the whole GPU while prefill launches one block per (row, kv head).
#ifndef KVFOLD_KERNELS_CUDA_ATTENTION_CUH_
#define KVFOLD_KERNELS_CUDA_ATTENTION_CUH_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/attn_rows.h"
#include "core/dtype.h"

namespace kvfold::kernels::cuda {

inline constexpr int kAttnMaxGroup = 16;     // num_heads / num_kv_heads
inline constexpr int kAttnMaxHeadDim = 256;

struct AttentionParams {
  const float* q = nullptr;        // [num_rows, num_heads * head_dim], already rotated
  float* out = nullptr;            // [num_rows, num_heads * head_dim]
  const kernels::AttnRow* rows = nullptr;  // [num_rows]
  const int32_t* block_tables = nullptr;  // [*]
  // Float caches [num_blocks, num_kv_heads, block_size, head_dim] (kernels::FloatKvIndex);
  // INT8 codes [num_blocks, block_size, num_kv_heads * head_dim].
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  core::DType cache_type = core::DType::kF32;
  // kI8 only (KIVI, kernels/quant/kv_quant.h): a block's keys are one per-channel group,
  // values are per token in groups of v_group_size channels. Scales are F32, or fp16 (the
  // engine's kernels::KvCacheI8) when fp16_scales is set.
  const void* k_scale = nullptr;  // [num_blocks, num_kv_heads * head_dim]
  const void* v_scale = nullptr;  // [num_blocks * block_size, ceil(kv_dim / v_group_size)]
  int32_t v_group_size = 0;
  bool fp16_scales = false;
  // kI8 only, optional (the engine's AttentionInt8): per row its kernels::AttnOwnBlock.
  // Entries that live in the row's own block are read F32 from page `own.page` of
  // k_pages / v_pages instead of from the codes (whose scales may not exist yet: the
  // block may be open). null = no own block.
  const kernels::AttnOwnBlock* own = nullptr;  // [num_rows]
  const float* k_pages = nullptr;  // [num_pages, block_size, num_kv_heads * head_dim]
  const float* v_pages = nullptr;  // [num_pages, block_size, num_kv_heads * head_dim]
  const float* rope_table = nullptr;  // [rope_rows, head_dim] (rope.cuh)
  int32_t rope_rows = 0;
  int32_t num_rows = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;    // even, <= kAttnMaxHeadDim
  int32_t block_size = 0;
  float scale = 0.0f;      // usually 1 / sqrt(head_dim)
};

// Workspace bytes that suffice for any num_rows with these head counts.
size_t AttentionWorkspaceBytes(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim);

// Runs attention on `stream`. `workspace` (device, F32-aligned) may be smaller than
// AttentionWorkspaceBytes: the split count then shrinks (down to 1, which needs none).
// A row with no visible key gets zeros. Positions outside the table are clamped.
// InvalidArgument for inconsistent shapes (GQA group > kAttnMaxGroup, odd or too large
// head_dim, missing int8 scales, null pointers).
absl::Status Attention(const AttentionParams& params, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream);

// The number of splits Attention uses for `num_rows` (exposed for tests and benchmarks).
int32_t AttentionNumSplits(int32_t num_rows, int32_t num_kv_heads);

}  // namespace kvfold::kernels::cuda

#endif  // KVFOLD_KERNELS_CUDA_ATTENTION_CUH_
