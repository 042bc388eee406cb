// Paged GQA attention over an INT8 KV cache (backend.h KvCacheI8), and the quantization
// of a sealed block.
//
// Same row contract as attention.cc; the only difference is where an entry's F32 values
// come from: the row's own block is read from its F32 page, every other block from its
// int8 codes times the block's scales (kernels/quant/kv_quant.h). Dequantization happens
// per entry inside the op, never for the whole cache. The reference kernel follows
// AttentionReference operation for operation, so it equals AttentionReference run on a
// cache that holds the dequantized values (tests/kernels/cpu/int8_attention_test.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/fp16.h"
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/quant/kv_quant.h"

namespace kvfold::kernels::cpu {
namespace {

using KeyRef = attention_simd::KeyRefT<AttentionArgsI8>;
constexpr int kMaxHeadDim = 1024;  // ModelConfig::Validate
using attention_simd::AxpyAvx2;
using attention_simd::AxpyPortable;
using attention_simd::DotAvx2;
using attention_simd::DotPortable;
using attention_simd::SoftmaxAvx2;
using attention_simd::SoftmaxPortable;

// The F32 key scales of the block last dequantized (consecutive entries mostly share a
// block): converting fp16 -> F32 once per block instead of once per entry.
struct KeyScales {
  int64_t block = -1;
  std::vector<float> scales;  // [kv_dim]
};

// Loads visible entry `idx` of a row: its un-rotated key (all kv heads) into k and its
// value into v (either may be null). Returns the entry's position.
inline int LoadEntry(const AttentionArgsI8& a, const KeyRef& keys, const int32_t* own, int idx,
                     KeyScales& ks, float* k, float* v) {
  int pos;
  const int kv_dim = keys.kv_dim;
  const int bs = a.shape.block_size;
  const int64_t slot = keys.Locate(idx, &pos) / kv_dim;  // block * block_size + offset
  const int64_t block = slot / bs;
  if (block == own[kAttnOwnBlock]) {
    const int64_t p = (static_cast<int64_t>(own[kAttnOwnPage]) * bs + slot % bs) * kv_dim;
    if (k != nullptr) std::memcpy(k, a.k_pages + p, kv_dim * sizeof(float));
    if (v != nullptr) std::memcpy(v, a.v_pages + p, kv_dim * sizeof(float));
    return pos;
  }
  if (k != nullptr) {
    if (ks.block != block) {
      ks.scales.resize(kv_dim);
      const uint16_t* half = a.k_scales + block * kv_dim;
      for (int c = 0; c < kv_dim; ++c) ks.scales[c] = Fp16ToFp32(half[c]);
      ks.block = block;
    }
    const int8_t* codes = a.k_codes + slot * kv_dim;
    const float* scales = ks.scales.data();
    for (int c = 0; c < kv_dim; ++c) k[c] = static_cast<float>(codes[c]) * scales[c];
  }
  if (v != nullptr) {
    const int8_t* codes = a.v_codes + slot * kv_dim;
    const uint16_t* scales = a.v_scales + slot * a.v_groups;
    for (int c0 = 0, g = 0; c0 < kv_dim; c0 += a.value_group, ++g) {
      const float s = Fp16ToFp32(scales[g]);
      const int c1 = std::min(kv_dim, c0 + a.value_group);
      for (int c = c0; c < c1; ++c) v[c] = static_cast<float>(codes[c]) * s;
    }
  }
  return pos;
}

// Key (rotated per kv head) and value of one entry into k_out / v_out (kv_dim each).
inline void LoadRotated(const AttentionArgsI8& a, const KeyRef& keys, const int32_t* own, int idx,
                        KeyScales& ks, float* raw, float* k_out, float* v_out) {
  const int hd = a.shape.head_dim;
  const int pos = LoadEntry(a, keys, own, idx, ks, raw, v_out);
  const float* cs = a.rope + static_cast<int64_t>(pos) * hd;
  for (int h = 0; h < a.shape.num_kv_heads; ++h) RotateHalf(raw + h * hd, cs, hd, k_out + h * hd);
}

}  // namespace

void AttentionInt8Reference(const AttentionArgsI8& a, std::vector<float>& scratch) {
  const AttentionShape& sh = a.shape;
  const int hd = sh.head_dim;
  const int q_dim = sh.num_heads * hd;
  const int kv_dim = sh.num_kv_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads;
  std::vector<float> raw(kv_dim), krot(kv_dim), val(kv_dim);
  KeyScales ks;
  for (int64_t r = 0; r < a.n; ++r) {
    const int32_t* own = a.own + r * kAttnI8Fields;
    KeyRef keys{a, a.rows + r * kAttnRowFields, kv_dim};
    const int nk = keys.num_keys();
    if (scratch.size() < static_cast<size_t>(nk)) scratch.resize(nk);
    for (int h = 0; h < sh.num_heads; ++h) {
      const int kvh = h / group;
      const float* q = a.q + r * q_dim + h * hd;
      float* out = a.out + r * q_dim + h * hd;
      float max_score = -std::numeric_limits<float>::infinity();
      for (int idx = 0; idx < nk; ++idx) {
        const int pos = LoadEntry(a, keys, own, idx, ks, raw.data(), nullptr);
        RotateHalf(raw.data() + kvh * hd, a.rope + static_cast<int64_t>(pos) * hd, hd, krot.data());
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
        LoadEntry(a, keys, own, idx, ks, nullptr, val.data());
        const float* v = val.data() + kvh * hd;
        const float p = scratch[idx] * inv;
        for (int d = 0; d < hd; ++d) out[d] += p * v[d];
      }
    }
  }
}

namespace {

// One task = (row, kv head) over its group's dequantized int8 keys (rotated) and values;
// entries of the row's own block come from its page instead (rotated here).
struct TaskI8 {
  const AttentionArgsI8* a;
  const float* keys;        // [group keys, kv_dim]
  const float* values;      // [group keys, kv_dim]
  const int64_t* key_slot;  // [group keys] physical slot
  const int32_t* key_pos;   // [group keys] position
  int key_base, prefix_keys;
  int64_t row;
  int kvh;
  float* scores;  // [group, nk]
};

#define KVFOLD_ATTEND_I8(NAME, ATTR, DOT, AXPY, SOFTMAX)                                       \
  ATTR void NAME(const TaskI8& t) {                                                            \
    const AttentionArgsI8& a = *t.a;                                                           \
    const AttentionShape& sh = a.shape;                                                        \
    const int hd = sh.head_dim, q_dim = sh.num_heads * hd, kv_dim = sh.num_kv_heads * hd;      \
    const int group = sh.num_heads / sh.num_kv_heads, bs = sh.block_size;                      \
    const int32_t* row = a.rows + t.row * kAttnRowFields;                                      \
    const int32_t* own = a.own + t.row * kAttnI8Fields;                                        \
    const int64_t own_block = own[kAttnOwnBlock];                                              \
    const float* own_k = a.k_pages + static_cast<int64_t>(own[kAttnOwnPage]) * bs * kv_dim;    \
    const float* own_v = a.v_pages + static_cast<int64_t>(own[kAttnOwnPage]) * bs * kv_dim;    \
    const int pv = row[kAttnPrefixVisible];                                                    \
    const int nk = pv + (row[kAttnMainHi] - row[kAttnMainLo]);                                 \
    const float* q0 = a.q + t.row * q_dim + t.kvh * group * hd;                                \
    float* out0 = a.out + t.row * q_dim + t.kvh * group * hd;                                  \
    float krot[kMaxHeadDim];                                                                   \
    for (int idx = 0; idx < nk; ++idx) {                                                       \
      const int64_t k = t.key_base + (idx < pv ? idx : t.prefix_keys + (idx - pv));            \
      const int64_t slot = t.key_slot[k];                                                      \
      const float* key = t.keys + k * kv_dim + t.kvh * hd;                                     \
      if (slot / bs == own_block) {                                                            \
        RotateHalf(own_k + (slot % bs) * kv_dim + t.kvh * hd,                                  \
                   a.rope + static_cast<int64_t>(t.key_pos[k]) * hd, hd, krot);                \
        key = krot;                                                                            \
      }                                                                                        \
      for (int gh = 0; gh < group; ++gh) {                                                     \
        t.scores[gh * nk + idx] = DOT(q0 + gh * hd, key, hd) * sh.scale;                       \
      }                                                                                        \
    }                                                                                          \
    for (int gh = 0; gh < group; ++gh) {                                                       \
      SOFTMAX(t.scores + gh * nk, nk);                                                         \
      std::memset(out0 + gh * hd, 0, hd * sizeof(float));                                      \
    }                                                                                          \
    for (int idx = 0; idx < nk; ++idx) {                                                       \
      const int64_t k = t.key_base + (idx < pv ? idx : t.prefix_keys + (idx - pv));            \
      const int64_t slot = t.key_slot[k];                                                      \
      const float* v = slot / bs == own_block ? own_v + (slot % bs) * kv_dim + t.kvh * hd      \
                                              : t.values + k * kv_dim + t.kvh * hd;            \
      for (int gh = 0; gh < group; ++gh) AXPY(t.scores[gh * nk + idx], v, out0 + gh * hd, hd); \
    }                                                                                          \
  }

KVFOLD_ATTEND_I8(AttendI8Avx2, __attribute__((target("avx2,fma"))), DotAvx2, AxpyAvx2, SoftmaxAvx2)
KVFOLD_ATTEND_I8(AttendI8Portable, , DotPortable, AxpyPortable, SoftmaxPortable)
#undef KVFOLD_ATTEND_I8

// attention.cc's rule: rows whose keys sit at the same positions share one dequantized,
// rotated copy of the keys (a prefill's rows of one sequence: each entry once per call).
bool SameLayout(const int32_t* a, const int32_t* b) {
  return a[kAttnPrefixTable] == b[kAttnPrefixTable] &&
         a[kAttnPrefixPosBase] == b[kAttnPrefixPosBase] &&
         a[kAttnPrefixPosStride] == b[kAttnPrefixPosStride] &&
         a[kAttnMainTable] == b[kAttnMainTable] && a[kAttnMainFront] == b[kAttnMainFront] &&
         a[kAttnMainLo] == b[kAttnMainLo] && a[kAttnMainPosLo] == b[kAttnMainPosLo];
}

}  // namespace

void AttentionInt8Optimized(ThreadPool& pool, const AttentionArgsI8& a,
                            AttentionI8Scratch& scratch) {
  const AttentionShape& sh = a.shape;
  const int hd = sh.head_dim;
  const int kv_dim = sh.num_kv_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads;
  const int bs = sh.block_size;
  const bool avx2 = CpuHasAvx2Fma();
  if (scratch.per_thread.size() < static_cast<size_t>(pool.num_threads()) * 2) {
    scratch.per_thread.resize(static_cast<size_t>(pool.num_threads()) * 2);
  }
  // 1. Key groups and the union of their keys (prefix [0, max visible) + main [lo, max hi)).
  // Per group, up to two blocks whose codes are not valid yet (own blocks of its rows
  // that are not sealed: the open last block of a segment, read only by its own rows);
  // a sequence has at most two open blocks, a third starts a new group.
  auto& groups = scratch.groups;  // first row, prefix keys, main keys, base, rows, open x2
  groups.clear();
  auto& row_group = scratch.row_group;
  if (row_group.size() < static_cast<size_t>(a.n)) row_group.resize(a.n);
  for (int64_t r = 0; r < a.n; ++r) {
    const int32_t* row = a.rows + r * kAttnRowFields;
    const int32_t* own = a.own + r * kAttnI8Fields;
    const int open = own[kAttnOwnSealed] ? -1 : own[kAttnOwnBlock];
    bool fits = !groups.empty() && SameLayout(a.rows + groups.back()[0] * kAttnRowFields, row);
    if (fits && open >= 0) {
      auto& g = groups.back();
      fits = g[5] == open || g[6] == open || g[5] < 0 || g[6] < 0;
    }
    if (!fits) groups.push_back({static_cast<int>(r), 0, 0, 0, 0, -1, -1});
    auto& g = groups.back();
    if (open >= 0 && g[5] != open && g[6] != open) (g[5] < 0 ? g[5] : g[6]) = open;
    ++g[4];
    g[1] = std::max(g[1], row[kAttnPrefixVisible]);
    g[2] = std::max(g[2], row[kAttnMainHi] - row[kAttnMainLo]);
    row_group[r] = static_cast<int>(groups.size()) - 1;
  }
  int64_t total_keys = 0;
  for (auto& g : groups) {
    g[3] = static_cast<int>(total_keys);
    total_keys += g[1] + g[2];
  }
  const size_t floats = static_cast<size_t>(total_keys) * kv_dim;
  if (scratch.keys.size() < floats) scratch.keys.resize(floats);
  if (scratch.values.size() < floats) scratch.values.resize(floats);
  if (scratch.key_slot.size() < static_cast<size_t>(total_keys)) {
    scratch.key_slot.resize(total_keys);
    scratch.key_pos.resize(total_keys);
  }
  scratch.key_group.resize(total_keys);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (int k = 0; k < groups[gi][1] + groups[gi][2]; ++k) {
      scratch.key_group[groups[gi][3] + k] = static_cast<int>(gi);
    }
  }
  float* keys = scratch.keys.data();
  float* values = scratch.values.data();
  if (scratch.key_scales.size() < static_cast<size_t>(pool.num_threads())) {
    scratch.key_scales.resize(pool.num_threads());
  }
  // No row owns a block here (kNone): every entry not in an open block is dequantized.
  const int32_t kNone[kAttnI8Fields] = {-1, -1, 1};
  auto dequant = [&](int64_t k0, int64_t k1, int thread) {
    std::vector<float>& raw = scratch.per_thread[pool.num_threads() + thread];
    if (raw.size() < static_cast<size_t>(kv_dim)) raw.resize(kv_dim);
    std::vector<float>& ks_buf = scratch.key_scales[thread];
    KeyScales ks{-1, std::move(ks_buf)};
    for (int64_t k = k0; k < k1; ++k) {
      const auto& g = groups[scratch.key_group[k]];
      int32_t probe[kAttnRowFields];
      std::memcpy(probe, a.rows + static_cast<int64_t>(g[0]) * kAttnRowFields, sizeof(probe));
      probe[kAttnPrefixVisible] = g[1];
      const KeyRef ref{a, probe, kv_dim};
      int pos;
      const int64_t slot = ref.Locate(static_cast<int>(k - g[3]), &pos) / kv_dim;
      scratch.key_slot[k] = slot;
      scratch.key_pos[k] = pos;
      if (slot / bs == g[5] || slot / bs == g[6]) continue;  // read from pages only
      LoadRotated(a, ref, kNone, static_cast<int>(k - g[3]), ks, raw.data(), keys + k * kv_dim,
                  values + k * kv_dim);
    }
    ks_buf = std::move(ks.scales);  // keep the capacity: no allocation next time
  };
  if (total_keys * kv_dim >= (1 << 15)) {
    pool.ParallelFor(total_keys, 64, dequant);
  } else {
    dequant(0, total_keys, 0);
  }

  // 2. One task = (row, kv head).
  auto attend = avx2 ? AttendI8Avx2 : AttendI8Portable;
  auto body = [&](int64_t t0, int64_t t1, int thread) {
    std::vector<float>& buf = scratch.per_thread[thread];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / sh.num_kv_heads;
      const int32_t* row = a.rows + r * kAttnRowFields;
      const auto& g = groups[row_group[r]];
      const int nk = row[kAttnPrefixVisible] + (row[kAttnMainHi] - row[kAttnMainLo]);
      const size_t need = static_cast<size_t>(group) * nk;
      if (buf.size() < need) buf.resize(need);
      attend(TaskI8{&a, keys, values, scratch.key_slot.data(), scratch.key_pos.data(), g[3], g[1],
                    r, static_cast<int>(t % sh.num_kv_heads), buf.data()});
    }
  };
  int64_t work = 0;
  for (int64_t r = 0; r < a.n; ++r) {
    work += KeyRef{a, a.rows + r * kAttnRowFields, kv_dim}.num_keys();
  }
  if (work * sh.num_heads * hd < (1 << 16)) {
    body(0, a.n * sh.num_kv_heads, 0);
  } else {
    pool.ParallelFor(a.n * sh.num_kv_heads, 1, body);
  }
}

void SealBlockInt8(const float* k_page, const float* v_page, int count, int kv_dim, int value_group,
                   int8_t* k_codes, uint16_t* k_scales, int8_t* v_codes, uint16_t* v_scales,
                   float* scratch) {
  if (count <= 0) return;
  // Arguments are validated by the backend; these calls cannot fail. The scales are
  // already fp16 values: the conversion is exact.
  (void)quant::QuantizeKeys(k_page, count, kv_dim, {.group_size = count, .fp16_scales = true},
                            k_codes, scratch);
  for (int c = 0; c < kv_dim; ++c) k_scales[c] = Fp32ToFp16(scratch[c]);
  (void)quant::QuantizeValues(v_page, count, kv_dim,
                              {.group_size = value_group, .fp16_scales = true}, v_codes, scratch);
  const int64_t num_v = int64_t{count} * quant::NumValueGroups(kv_dim, value_group);
  for (int64_t i = 0; i < num_v; ++i) v_scales[i] = Fp32ToFp16(scratch[i]);
}

}  // namespace kvfold::kernels::cpu
