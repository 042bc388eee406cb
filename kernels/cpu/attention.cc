// Paged GQA attention over [prefix | main] with keys rotated inside the op.
//
// Per query row (AttnRow fields): keys = prefix entries [0, prefix_visible) at positions
// base + j * stride, then main entries [lo, hi) at positions pos_lo + (j - lo). Each key
// is read UN-ROTATED from the cache and rotated by its position now, which is what keeps
// windowed positions exact forever (CONTRACTS.md). Scores are scaled, softmaxed with the
// max subtracted, and V is accumulated in key order. Everything for a row depends only on
// that row's inputs: batch-invariant by construction.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/cpu_ops.h"

namespace kvfold::kernels::cpu {

namespace {
using KeyRef = attention_simd::KeyRefT<AttentionArgs>;
using attention_simd::AxpyAvx2;
using attention_simd::AxpyPortable;
using attention_simd::DotAvx2;
using attention_simd::DotPortable;
using attention_simd::SoftmaxAvx2;
using attention_simd::SoftmaxPortable;
}  // namespace

void AttentionReference(const AttentionArgs& a, std::vector<float>& scratch) {
  const AttentionShape& sh = a.shape;
  const int hd = sh.head_dim;
  const int q_dim = sh.num_heads * hd;
  const int kv_dim = sh.num_kv_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads;
  float krot_buf[1024];  // head_dim <= 1024 (ModelConfig::Validate)
  float* krot = krot_buf;
  for (int64_t r = 0; r < a.n; ++r) {
    KeyRef keys{a, a.rows + r * kAttnRowFields, kv_dim};
    const int nk = keys.num_keys();
    if (scratch.size() < static_cast<size_t>(nk)) scratch.resize(nk);
    for (int h = 0; h < sh.num_heads; ++h) {
      const int kvh = h / group;
      const float* q = a.q + r * q_dim + h * hd;
      float* out = a.out + r * q_dim + h * hd;
      float max_score = -std::numeric_limits<float>::infinity();
      for (int idx = 0; idx < nk; ++idx) {
        int pos;
        const int64_t off = keys.Locate(idx, &pos);
        RotateHalf(a.k_cache + off + kvh * hd, a.rope + static_cast<int64_t>(pos) * hd, hd,
                   krot);
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
        int pos;
        const float* v = a.v_cache + keys.Locate(idx, &pos) + kvh * hd;
        const float p = scratch[idx] * inv;
        for (int d = 0; d < hd; ++d) out[d] += p * v[d];
      }
    }
  }
}

namespace {

// One task = (row, kv head): scores, softmax and V for the query heads of the group.
// Stamped out twice (AVX2 and portable) so that the small per-key helpers inline.
struct TaskArgs {
  const AttentionArgs* a;
  const float* rotated;      // [group keys, kv_dim]
  const int64_t* v_off;      // per group key
  int key_base, prefix_keys; // of the row's key group
  int64_t row;
  int kvh;
  float* scores;             // [group, nk]
  bool inline_rotate;        // keys not pre-rotated: rotate (and locate) here
};

#define KVFOLD_ATTEND_TASK(NAME, ATTR, DOT, AXPY, SOFTMAX)                                   \
  ATTR void NAME(const TaskArgs& t) {                                                          \
    const AttentionArgs& a = *t.a;                                                             \
    const AttentionShape& sh = a.shape;                                                        \
    const int hd = sh.head_dim, q_dim = sh.num_heads * hd, kv_dim = sh.num_kv_heads * hd;      \
    const int group = sh.num_heads / sh.num_kv_heads;                                          \
    const int32_t* row = a.rows + t.row * kAttnRowFields;                                      \
    const int pv = row[kAttnPrefixVisible];                                                    \
    const int nk = pv + (row[kAttnMainHi] - row[kAttnMainLo]);                                 \
    const float* q0 = a.q + t.row * q_dim + t.kvh * group * hd;                                \
    float* out0 = a.out + t.row * q_dim + t.kvh * group * hd;                                  \
    const KeyRef keys{a, row, kv_dim};                                                         \
    float krot_buf[1024];                                                                      \
    for (int idx = 0; idx < nk; ++idx) {                                                       \
      const float* krot;                                                                       \
      if (t.inline_rotate) {                                                                   \
        int pos;                                                                               \
        const int64_t off = keys.Locate(idx, &pos);                                            \
        RotateHalf(a.k_cache + off + t.kvh * hd, a.rope + static_cast<int64_t>(pos) * hd, hd, krot_buf); \
        krot = krot_buf;                                                                       \
      } else {                                                                                 \
        const int64_t k = t.key_base + (idx < pv ? idx : t.prefix_keys + (idx - pv));          \
        krot = t.rotated + k * kv_dim + t.kvh * hd;                                            \
      }                                                                                        \
      for (int gh = 0; gh < group; ++gh) t.scores[gh * nk + idx] = DOT(q0 + gh * hd, krot, hd) * sh.scale; \
    }                                                                                          \
    for (int gh = 0; gh < group; ++gh) {                                                       \
      SOFTMAX(t.scores + gh * nk, nk);                                                         \
      std::memset(out0 + gh * hd, 0, hd * sizeof(float));                                      \
    }                                                                                          \
    for (int idx = 0; idx < nk; ++idx) {                                                       \
      int64_t voff;                                                                            \
      if (t.inline_rotate) {                                                                   \
        int pos;                                                                               \
        voff = keys.Locate(idx, &pos);                                                         \
      } else {                                                                                 \
        voff = t.v_off[t.key_base + (idx < pv ? idx : t.prefix_keys + (idx - pv))];            \
      }                                                                                        \
      const float* v = a.v_cache + voff + t.kvh * hd;                                          \
      for (int gh = 0; gh < group; ++gh) AXPY(t.scores[gh * nk + idx], v, out0 + gh * hd, hd); \
    }                                                                                          \
  }

KVFOLD_ATTEND_TASK(AttendTaskAvx2, __attribute__((target("avx2,fma"))), DotAvx2, AxpyAvx2, SoftmaxAvx2)
KVFOLD_ATTEND_TASK(AttendTaskPortable, , DotPortable, AxpyPortable, SoftmaxPortable)
#undef KVFOLD_ATTEND_TASK

// Rows whose keys sit at the same positions (same prefix rule, same main table, front,
// lo and position of lo) share one pre-rotated copy of their keys: prefill rows of one
// sequence rotate each key once instead of once per row.
bool SameKeyLayout(const int32_t* a, const int32_t* b) {
  return a[kAttnPrefixTable] == b[kAttnPrefixTable] && a[kAttnPrefixPosBase] == b[kAttnPrefixPosBase] &&
         a[kAttnPrefixPosStride] == b[kAttnPrefixPosStride] && a[kAttnMainTable] == b[kAttnMainTable] &&
         a[kAttnMainFront] == b[kAttnMainFront] && a[kAttnMainLo] == b[kAttnMainLo] &&
         a[kAttnMainPosLo] == b[kAttnMainPosLo];
}

}  // namespace

void AttentionOptimized(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch) {
  const AttentionShape& sh = a.shape;
  const int hd = sh.head_dim;
  const int kv_dim = sh.num_kv_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads;
  const bool avx2 = CpuHasAvx2Fma();
  if (scratch.per_thread.size() < static_cast<size_t>(pool.num_threads())) {
    scratch.per_thread.resize(pool.num_threads());
  }
  // 1. Key groups: consecutive rows with the same key layout. For each: the union of
  // their keys = prefix [0, max visible) + main [lo, max hi), laid out in that order.
  auto& groups = scratch.groups;  // per group: first row, prefix keys, main keys, key base
  groups.clear();
  auto& row_group = scratch.row_group;
  if (row_group.size() < static_cast<size_t>(a.n)) row_group.resize(a.n);
  int64_t total_keys = 0;
  for (int64_t r = 0; r < a.n; ++r) {
    const int32_t* row = a.rows + r * kAttnRowFields;
    if (groups.empty() || !SameKeyLayout(a.rows + groups.back()[0] * kAttnRowFields, row)) {
      groups.push_back({static_cast<int>(r), 0, 0, 0, 0});
    }
    auto& g = groups.back();
    ++g[4];
    g[1] = std::max(g[1], row[kAttnPrefixVisible]);
    g[2] = std::max(g[2], row[kAttnMainHi] - row[kAttnMainLo]);
    row_group[r] = static_cast<int>(groups.size()) - 1;
  }
  // A group of one row (a decode step) rotates its keys inside its tasks instead: no
  // round trip of the rotated keys through memory. Same RotateHalf, same bits.
  for (auto& g : groups) {
    g[3] = static_cast<int>(total_keys);
    if (g[4] > 1) total_keys += g[1] + g[2];
  }
  if (scratch.rotated.size() < static_cast<size_t>(total_keys) * kv_dim) {
    scratch.rotated.resize(static_cast<size_t>(total_keys) * kv_dim);
    scratch.v_offsets.resize(total_keys);
  }
  if (scratch.v_offsets.size() < static_cast<size_t>(total_keys)) scratch.v_offsets.resize(total_keys);
  scratch.key_group.resize(total_keys);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (groups[gi][4] <= 1) continue;
    for (int k = 0; k < groups[gi][1] + groups[gi][2]; ++k) scratch.key_group[groups[gi][3] + k] = static_cast<int>(gi);
  }
  float* rotated = scratch.rotated.data();
  int64_t* v_off = scratch.v_offsets.data();
  auto rotate = [&](int64_t k0, int64_t k1, int) {
    for (int64_t k = k0; k < k1; ++k) {
      const auto& g = groups[scratch.key_group[k]];
      const int32_t* row = a.rows + static_cast<int64_t>(g[0]) * kAttnRowFields;
      const int local = static_cast<int>(k - g[3]);
      // Locate with a row whose visible prefix is the group's maximum.
      int32_t probe[kAttnRowFields];
      std::memcpy(probe, row, sizeof(probe));
      probe[kAttnPrefixVisible] = g[1];
      KeyRef keys{a, probe, kv_dim};
      int pos;
      const int64_t off = keys.Locate(local, &pos);
      v_off[k] = off;
      const float* cs = a.rope + static_cast<int64_t>(pos) * hd;
      for (int h = 0; h < sh.num_kv_heads; ++h) {
        RotateHalf(a.k_cache + off + h * hd, cs, hd, rotated + k * kv_dim + h * hd);
      }
    }
  };
  const bool parallel = total_keys * kv_dim * a.n >= (1 << 16);
  if (parallel) {
    pool.ParallelFor(total_keys, 64, rotate);
  } else {
    rotate(0, total_keys, 0);
  }

  // 2. One task = (row, kv head).
  auto attend = avx2 ? AttendTaskAvx2 : AttendTaskPortable;
  auto body = [&](int64_t t0, int64_t t1, int thread) {
    std::vector<float>& buf = scratch.per_thread[thread];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / sh.num_kv_heads;
      const int32_t* row = a.rows + r * kAttnRowFields;
      const auto& g = groups[row_group[r]];
      const int nk = row[kAttnPrefixVisible] + (row[kAttnMainHi] - row[kAttnMainLo]);
      const size_t need = static_cast<size_t>(group) * nk;
      if (buf.size() < need) buf.resize(need);
      attend(TaskArgs{&a, rotated, v_off, g[3], g[1], r, static_cast<int>(t % sh.num_kv_heads),
                      buf.data(), g[4] == 1});
    }
  };
  int64_t work = 0;
  for (int64_t r = 0; r < a.n; ++r) work += KeyRef{a, a.rows + r * kAttnRowFields, kv_dim}.num_keys();
  if (work * sh.num_heads * hd < (1 << 16)) {
    body(0, a.n * sh.num_kv_heads, 0);
  } else {
    pool.ParallelFor(a.n * sh.num_kv_heads, 1, body);
  }
}

}  // namespace kvfold::kernels::cpu
