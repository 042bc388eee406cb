// Paged GQA attention over an INT8 KV cache (backend.h KvCacheI8): the plain reference
// (the optimised kernel is the tiled one, attention_tiled.cc), and the quantization of a
// sealed block.
//
// Same row contract as attention.cc; the only difference is where an entry's F32 values
// come from: the row's own block is read from its F32 page, every other block from its
// int8 codes times the block's scales (kernels/quant/kv_quant.h). Dequantization happens
// per entry inside the op, never for the whole cache. The reference kernel follows
// AttentionReference operation for operation, so it equals AttentionReference run on a
// cache that holds the dequantized values (tests/kernels/cpu/int8_kv_test.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/fp16.h"
#include "kernels/cpu/attention_keys.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/quant/kv_quant.h"

namespace kvfold::kernels::cpu {
namespace {

// The F32 key scales of the block last dequantized (consecutive entries mostly share a
// block): converting fp16 -> F32 once per block instead of once per entry.
struct KeyScales {
  int64_t block = -1;
  std::vector<float> scales;  // [kv_dim]
};

// Loads visible entry `idx` of a row: its un-rotated key (all kv heads) into k and its
// value into v (either may be null). Returns the entry's position.
int LoadEntry(const AttentionArgsI8& a, const RowKeys& keys, const AttnOwnBlock& own, int idx,
              KeyScales& ks, float* k, float* v) {
  const int kv_dim = a.shape.num_kv_heads * a.shape.head_dim;
  const int bs = a.shape.block_size;
  const KeyEntry e = keys.Locate(idx);
  if (e.block == own.block) {
    const int64_t p = (int64_t{own.page} * bs + e.offset) * kv_dim;
    if (k != nullptr) std::memcpy(k, a.k_pages + p, kv_dim * sizeof(float));
    if (v != nullptr) std::memcpy(v, a.v_pages + p, kv_dim * sizeof(float));
    return e.pos;
  }
  const int64_t slot = e.Slot(bs);
  if (k != nullptr) {
    if (ks.block != e.block) {
      ks.scales.resize(kv_dim);
      const uint16_t* half = a.k_scales + int64_t{e.block} * kv_dim;
      for (int c = 0; c < kv_dim; ++c) ks.scales[c] = Fp16ToFp32(half[c]);
      ks.block = e.block;
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
  return e.pos;
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
    const AttnOwnBlock& own = a.own[r];
    const RowKeys keys(a.rows[r], a.block_tables, sh.block_size);
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
