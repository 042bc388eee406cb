// Paged GQA attention over an INT8 KV cache (backend.h KvCacheI8): the plain reference
// (the optimised kernel is the tiled one, attention_tiled.cc), and the quantization of a
// sealed block (kernels/quant's, with an AVX-512 path that gives its bits).
//
// Same row contract as attention.cc; the only difference is where an entry's F32 values
// come from: the row's own block is read from its F32 page, every other block from its
// int8 codes times the block's scales (kernels/quant/kv_quant.h). Dequantization happens
// per entry inside the op, never for the whole cache. The reference kernel follows
// AttentionReference operation for operation, so it equals AttentionReference run on a
// cache that holds the dequantized values (tests/kernels/cpu/int8_kv_test.cc).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/fp16.h"
#include "kernels/cpu/attention_keys.h"
#include "kernels/cpu/attention_reference.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
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
  const int hd = a.shape.head_dim;
  const int kv_dim = a.shape.num_kv_heads * hd;
  std::vector<float> raw(kv_dim), krot(hd), val(kv_dim);
  KeyScales ks;
  ReferenceAttention(
      a, scratch, krot.data(),
      [&](int64_t r, const RowKeys& keys, int kvh, int idx, int* pos) {
        *pos = LoadEntry(a, keys, a.own[r], idx, ks, raw.data(), nullptr);
        return raw.data() + kvh * hd;
      },
      [&](int64_t r, const RowKeys& keys, int kvh, int idx) {
        LoadEntry(a, keys, a.own[r], idx, ks, nullptr, val.data());
        return val.data() + kvh * hd;
      });
}

namespace {

// GCC 12's AVX-512 intrinsics read an undefined vector: false positives, silenced for the
// seal's path only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVFOLD_SEAL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))

// quant::Int8Scale(amax, true) of 16 lanes, as fp16 bits (*half) and as F32: amax / 127
// rounded to fp16 to nearest even, like Fp32ToFp16 (the lanes are never NaN).
KVFOLD_SEAL_AVX512 inline __m512 Scales16(__m512 amax, __m256i* half) {
  *half = _mm512_cvtps_ph(_mm512_div_ps(amax, _mm512_set1_ps(127.0f)),
                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_cvtph_ps(*half);
}

// quant::Int8Code of 16 lanes into 16 bytes at out: 0 where the scale is 0, else
// nearbyint(x / scale) (to nearest even) clamped to [-127, 127]; a NaN quotient gives 0,
// what the scalar conversion of a NaN gives on x86.
KVFOLD_SEAL_AVX512 inline void Codes16(__m512 x, __m512 scale, int8_t* out) {
  const __m512 q =
      _mm512_roundscale_ps(_mm512_div_ps(x, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  const __mmask16 zero = _mm512_cmp_ps_mask(scale, _mm512_setzero_ps(), _CMP_EQ_OQ) |
                         _mm512_cmp_ps_mask(q, q, _CMP_UNORD_Q);
  const __m512i codes = _mm512_maskz_cvtps_epi32(static_cast<__mmask16>(~zero), c);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(codes));
}

// SealBlockInt8 for kv_dim and value_group multiples of 16: keys 16 channels at a time
// over the block's entries, values 16 channels at a time within each group. max(|x|, amax)
// keeps amax for a NaN x, as std::max(amax, fabs(x)) does; max is exact, so a group's
// lanes reduced in any order give quant's sequential maximum.
KVFOLD_SEAL_AVX512 void SealAvx512(const float* k_page, const float* v_page, int count, int kv_dim,
                                   int value_group, int8_t* k_codes, uint16_t* k_scales,
                                   int8_t* v_codes, uint16_t* v_scales) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int c0 = 0; c0 < kv_dim; c0 += 16) {
    __m512 amax = _mm512_setzero_ps();
    for (int t = 0; t < count; ++t) {
      const __m512 x = _mm512_loadu_ps(k_page + int64_t{t} * kv_dim + c0);
      amax = _mm512_max_ps(_mm512_andnot_ps(sign, x), amax);
    }
    __m256i half;
    const __m512 scale = Scales16(amax, &half);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(k_scales + c0), half);
    for (int t = 0; t < count; ++t) {
      const int64_t at = int64_t{t} * kv_dim + c0;
      Codes16(_mm512_loadu_ps(k_page + at), scale, k_codes + at);
    }
  }
  const int groups = static_cast<int>(quant::NumValueGroups(kv_dim, value_group));
  for (int t = 0; t < count; ++t) {
    const float* row = v_page + int64_t{t} * kv_dim;
    int8_t* codes = v_codes + int64_t{t} * kv_dim;
    for (int g = 0; g < groups; ++g) {
      const int c0 = g * value_group, c1 = std::min(kv_dim, c0 + value_group);
      __m512 amax = _mm512_setzero_ps();
      for (int c = c0; c < c1; c += 16) {
        amax = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(row + c)), amax);
      }
      __m256i half;
      const __m512 scale = Scales16(_mm512_set1_ps(_mm512_reduce_max_ps(amax)), &half);
      v_scales[int64_t{t} * groups + g] = static_cast<uint16_t>(_mm256_extract_epi16(half, 0));
      for (int c = c0; c < c1; c += 16) Codes16(_mm512_loadu_ps(row + c), scale, codes + c);
    }
  }
}
#undef KVFOLD_SEAL_AVX512
#pragma GCC diagnostic pop

}  // namespace

void SealBlockInt8(const float* k_page, const float* v_page, int count, int kv_dim, int value_group,
                   int8_t* k_codes, uint16_t* k_scales, int8_t* v_codes, uint16_t* v_scales,
                   float* scratch) {
  if (count <= 0) return;
  // A 16-session decode step seals about one block per layer; quant's scalar loops took
  // ~4 % of it with an INT8 cache (docs/engine-measurements.md, "INT8 decode attention in address
  // order").
  if (ActiveIsa() == Isa::kAvx512 && kv_dim % 16 == 0 && value_group % 16 == 0) {
    SealAvx512(k_page, v_page, count, kv_dim, value_group, k_codes, k_scales, v_codes, v_scales);
    return;
  }
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
