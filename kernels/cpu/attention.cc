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
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/fp16.h"
#include "kernels/cpu/attention_keys.h"
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
  const int hd = sh.head_dim;
  const int q_dim = sh.num_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads;
  float krot_buf[1024];  // head_dim <= 1024 (ModelConfig::Validate)
  float* krot = krot_buf;
  float head_buf[1024];
  for (int64_t r = 0; r < a.n; ++r) {
    const RowKeys keys(a.rows[r], a.block_tables, sh.block_size);
    const int nk = keys.num_keys();
    if (scratch.size() < static_cast<size_t>(nk)) scratch.resize(nk);
    for (int h = 0; h < sh.num_heads; ++h) {
      const int kvh = h / group;
      const float* q = a.q + r * q_dim + h * hd;
      float* out = a.out + r * q_dim + h * hd;
      float max_score = -std::numeric_limits<float>::infinity();
      for (int idx = 0; idx < nk; ++idx) {
        const KeyEntry e = keys.Locate(idx);
        RotateHalf(HeadOf(a.k_cache, a.k_half, e.Slot(sh.block_size), kvh, sh, head_buf),
                   a.rope + static_cast<int64_t>(e.pos) * hd, hd, krot);
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += q[d] * krot[d];
        scratch[idx] = dot * sh.scale;
        max_score = std::max(max_score, scratch[idx]);
      }
      float sum = 0.0f;
      for (int idx = 0; idx < nk; ++idx) {
        scratch[idx] = std::exp(scratch[idx] - max_score);
        sum += scratch[idx];
      }
      const float inv = 1.0f / sum;
      std::fill(out, out + hd, 0.0f);
      for (int idx = 0; idx < nk; ++idx) {
        const float* v =
            HeadOf(a.v_cache, a.v_half, keys.Locate(idx).Slot(sh.block_size), kvh, sh, head_buf);
        const float p = scratch[idx] * inv;
        for (int d = 0; d < hd; ++d) out[d] += p * v[d];
      }
    }
  }
}

}  // namespace kvfold::kernels::cpu
