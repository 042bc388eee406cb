// The plain attention that the F32 / fp16 and the INT8 caches' references share
// (attention.cc, attention_int8.cc): they differ only in where an entry's F32 key and value
// come from, so one loop gives both the same operations in the same order.
#ifndef KVFOLD_KERNELS_CPU_ATTENTION_REFERENCE_H_
#define KVFOLD_KERNELS_CPU_ATTENTION_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_keys.h"
#include "kernels/cpu/cpu_ops.h"

namespace kvfold::kernels::cpu {

// Every row r < a.n and query head h of a (AttentionArgs or AttentionArgsI8): the row's
// keys in order (RowKeys), each one's KV head kvh = h / group read by
// key(r, keys, kvh, idx, &pos) (its head_dim un-rotated floats; pos: its position) and
// rotated by its rope row into krot (head_dim floats), scored q . key * scale; the scores
// softmaxed with their maximum subtracted; then value(r, keys, kvh, idx) (head_dim
// floats) weighted into the head's output in key order. Scratch holds the scores.
template <class Args, class Key, class Value>
void ReferenceAttention(const Args& a, std::vector<float>& scratch, float* krot, Key key,
                        Value value) {
  const AttentionShape& sh = a.shape;
  const int hd = sh.head_dim;
  const int q_dim = sh.num_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads;
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
        int pos = 0;
        const float* k = key(r, keys, kvh, idx, &pos);
        RotateHalf(k, a.rope + static_cast<int64_t>(pos) * hd, hd, krot);
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
        const float* v = value(r, keys, kvh, idx);
        const float p = scratch[idx] * inv;
        for (int d = 0; d < hd; ++d) out[d] += p * v[d];
      }
    }
  }
}

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_ATTENTION_REFERENCE_H_
