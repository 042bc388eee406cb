// Paged GQA attention over [prefix | main] with keys rotated inside the op: the plain
// reference (the optimised, tiled kernel is attention_tiled.cc).
//
// Per query row (kernels/attn_rows.h AttnRow): keys = prefix entries [0, prefix_visible)
// at positions base + j * stride, then main entries [lo, hi) at positions pos_lo + (j - lo).
// Each key is read UN-ROTATED from the cache and rotated by its position now, which is what
// keeps windowed positions exact forever (docs/contracts.md). Scores are scaled, softmaxed
// with the max subtracted, and V is accumulated in key order. Everything for a row depends
// only on that row's inputs: batch-invariant by construction. An fp16 cache
// (AttentionArgs::k_half) is read the same way, each key and value widened to F32 first.
// The loop is ReferenceAttention (attention_reference.h), shared with the INT8 cache's
// reference.
#include <cstdint>
#include <vector>

#include "common/fp16.h"
#include "kernels/cpu/attention_keys.h"
#include "kernels/cpu/attention_reference.h"
#include "kernels/cpu/cpu_ops.h"

namespace kvfold::kernels::cpu {
namespace {

// KV head `kvh` of the cache entry at `slot`: its head_dim floats, in place (F32 cache) or
// widened into buf (fp16 cache). The cache is head-major within a block (FloatKvIndex).
const float* HeadOf(const float* f32, const uint16_t* half, int64_t slot, int kvh,
                    const AttentionShape& sh, float* buf) {
  const int hd = sh.head_dim;
  const int64_t off = FloatKvIndex(slot, kvh, 0, sh);
  if (half == nullptr) return f32 + off;
  for (int d = 0; d < hd; ++d) buf[d] = Fp16ToFp32(half[off + d]);
  return buf;
}

}  // namespace

void AttentionReference(const AttentionArgs& a, std::vector<float>& scratch) {
  const AttentionShape& sh = a.shape;
  float krot[1024];  // head_dim <= 1024 (ModelConfig::Validate)
  float head_buf[1024];
  ReferenceAttention(
      a, scratch, krot,
      [&](int64_t, const RowKeys& keys, int kvh, int idx, int* pos) {
        const KeyEntry e = keys.Locate(idx);
        *pos = e.pos;
        return HeadOf(a.k_cache, a.k_half, e.Slot(sh.block_size), kvh, sh, head_buf);
      },
      [&](int64_t, const RowKeys& keys, int kvh, int idx) {
        return HeadOf(a.v_cache, a.v_half, keys.Locate(idx).Slot(sh.block_size), kvh, sh, head_buf);
      });
}

}  // namespace kvfold::kernels::cpu
