// Where the tiled attention's keys and values come from (attention_tiled.cc): one tile of
// a KV head's keys, and the three caches' loaders (F32 as stored, fp16 widened, INT8
// dequantized with each row's own block from its page). Every loader is inlined into each
// ISA path's task (the fp16 one is defined there, so its conversion inlines), so its loops
// use that path's vector registers.
#ifndef KVFOLD_KERNELS_CPU_ATTENTION_KV_H_
#define KVFOLD_KERNELS_CPU_ATTENTION_KV_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/fp16.h"
#include "kernels/cpu/attention_keys.h"
#include "kernels/cpu/attention_lanes.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec16.h"

namespace kvfold::kernels::cpu::tiled {

inline constexpr int kTile = kTileKeys;
static_assert(kAttentionPartKeys % kTile == 0, "slices start on a tile");
inline constexpr int kMaxHeadDim = 1024;  // ModelConfig::Validate

// Value rows and accumulators are padded to whole 16-lane vectors.
inline int PaddedHeadDim(int head_dim) { return (head_dim + 15) / 16 * 16; }

// Asks for the cache lines of [p, p + bytes) into L1 (or L2: kLocality). A decode row's keys sit
// one per slot (a KV head's head_dim values at a stride of kv_dim), far apart in the pool: without
// prefetching, every key and value load of a batched decode step waited for memory.
// kLocality is __builtin_prefetch's: 3 asks for L1, 1 for L2 (the decode tasks over several
// KV heads, attention_tiled.cc RunHeadsTask: an L1 prefetch holds one of the core's few L1
// miss buffers for a whole memory latency, which capped their reads).
// Always inlined: GCC's pure-const analysis would otherwise take a function holding only
// prefetches for one without effect and drop its calls.
template <int kLocality = 3>
[[gnu::always_inline]] inline void PrefetchBytes(const void* p, int64_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes - 1) & ~uintptr_t{63};
  for (uintptr_t line = first; line <= last; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, kLocality);
  }
}

// One tile of keys of one KV head.
struct Tile {
  float* kr;  // [kTile, head_dim] rotated keys (rows past count are 0)
  float* kt;  // [head_dim, kTile] kr transposed, for head_dim < kRowDotHeadDim
  float* vt;  // [kTile, hdp] values copied (hdp = PaddedHeadDim(head_dim))
  // Where column i's values are read, hdp floats (F32 cache with head_dim a multiple of
  // 16: the cache row itself; otherwise vt + i * hdp, whose floats past head_dim reach
  // only accumulator lanes that are never output).
  const float* vrow[kTile];
  KeyEntry entry[kTile];
  int first = 0;  // key index of column 0
  int count = 0;
};

// Scores by rows (each key's head_dim products in 16-lane chunks, then the lanes summed) from
// this head_dim up; below, by the transposed tile (one lane per key, a sequential sum over
// head_dim), which wastes no lanes on short heads. A function of the shape only.
inline constexpr int kRowDotHeadDim = 32;
inline bool RowDots(int head_dim) { return head_dim >= kRowDotHeadDim; }

// Where KV head `kvh` of entry e starts in an F32 or fp16 cache of `shape` (elements; the
// cache is head-major within a block, kernels/attn_rows.h FloatKvIndex), and how far apart
// an entry's consecutive heads lie.
inline int64_t HeadOffset(const AttentionShape& shape, const KeyEntry& e, int kvh) {
  return FloatKvIndex(e.block, e.offset, kvh, 0, shape.num_kv_heads, shape.block_size,
                      shape.head_dim);
}
inline int64_t HeadStride(const AttentionShape& shape) {
  return FloatKvIndex(0, 0, 1, 0, shape.num_kv_heads, shape.block_size, shape.head_dim);
}

// Where KV head `kvh` of entry e starts in an INT8 cache's codes ([num_blocks, block_size,
// kv_dim]: an entry's heads side by side).
inline int64_t CodesOffset(const AttentionShape& shape, const KeyEntry& e, int kvh) {
  return e.Slot(shape.block_size) * (shape.num_kv_heads * shape.head_dim) +
         int64_t{kvh} * shape.head_dim;
}

// Keys whose halves are whole 16-lane vectors (head_dim a multiple of 32) are rotated by
// RotatePiece, the others by RotateHalf.
inline bool VectorRotation(int head_dim) { return head_dim % 32 == 0; }

// RotateHalf's products and sums for lanes [i, i + 16) of each half (the same bits): a and
// b are x[i, i + 16) and x[half + i, half + i + 16), cs the rope row. Loaders rotate a
// key 16 lanes at a time straight from the cache (F32 as stored, fp16 widened), without a
// copy of the key and without the overlap checks GCC puts in RotateHalf's loop per key.
// RotatePiece's arithmetic with the rotated lanes left in registers: *lo and *hi are lanes
// [i, i + 16) and [half + i, half + i + 16) of the rotated key (the decode tasks over
// several KV heads use them directly, attention_tiled.cc).
[[gnu::always_inline]] inline void RotatePieceInRegisters(const V16& a, const V16& b,
                                                          const float* cs, int i, int half, V16* lo,
                                                          V16* hi) {
  V16 c, s;
  std::memcpy(&c, cs + i, sizeof(c));
  std::memcpy(&s, cs + half + i, sizeof(s));
  const V16 ac = a * c, bs = b * s, bc = b * c, as = a * s;
  *lo = ac - bs;
  *hi = bc + as;
}

[[gnu::always_inline]] inline void RotatePiece(const V16& a, const V16& b, const float* cs, int i,
                                               int half, float* __restrict out) {
  V16 lo, hi;
  RotatePieceInRegisters(a, b, cs, i, half, &lo, &hi);
  std::memcpy(out + i, &lo, sizeof(lo));
  std::memcpy(out + half + i, &hi, sizeof(hi));
}

// out = x (head_dim F32 values, VectorRotation(head_dim)) rotated by the rope row cs, piece
// by piece. The fp16 loader runs the same loop on halves widened in registers.
[[gnu::always_inline]] inline void RotateVectors(const float* x, const float* cs, int head_dim,
                                                 float* __restrict out) {
  for (int i = 0; i < head_dim / 2; i += 16) {
    V16 lo, hi;
    std::memcpy(&lo, x + i, sizeof(lo));
    std::memcpy(&hi, x + head_dim / 2 + i, sizeof(hi));
    RotatePiece(lo, hi, cs, i, head_dim / 2, out);
  }
}

// What the F32 and fp16 caches' loaders share: the cache of element type T (AttentionArgs'
// k_cache / v_cache or k_half / v_half), its prefetch, and one tile for every row.
template <class T>
class FloatKv {
 public:
  FloatKv(const AttentionArgs& a, int kvh, const T* k, const T* v)
      : a_(a), kvh_(kvh), k_(k), v_(v) {}
  // Starts reading entry e's key and value (one KV head: head_dim elements each).
  [[gnu::always_inline]] void Prefetch(const KeyEntry& e) const {
    const int64_t off = HeadOffset(a_.shape, e, kvh_);
    PrefetchBytes(k_ + off, a_.shape.head_dim * sizeof(T));
    PrefetchBytes(v_ + off, a_.shape.head_dim * sizeof(T));
  }
  const Tile& ForRow(int64_t, int, const Tile& shared, Tile&) { return shared; }

 protected:
  const AttentionArgs& a_;
  int kvh_;
  const T* k_;
  const T* v_;
};

// F32 cache: keys and values as stored.
class F32Kv : public FloatKv<float> {
 public:
  F32Kv(const AttentionArgs& a, int kvh) : FloatKv(a, kvh, a.k_cache, a.v_cache) {}
  // Rotated key (head_dim floats) and value of entry e for this task's KV head.
  // Inlined into each ISA's task, so the rotation uses its vector registers.
  // The values are read in place when head_dim is a multiple of 16 (whole vectors of the
  // row), else copied to v.
  [[gnu::always_inline]] void Load(const KeyEntry& e, float* krot, float* v, const float** vrow) {
    const int hd = a_.shape.head_dim;
    const int64_t off = HeadOffset(a_.shape, e, kvh_);
    const float* cs = a_.rope + static_cast<int64_t>(e.pos) * hd;
    if (VectorRotation(hd)) {
      RotateVectors(k_ + off, cs, hd, krot);
    } else {
      RotateHalf(k_ + off, cs, hd, krot);
    }
    const float* v_src = v_ + off;
    if (hd % 16 == 0) {
      *vrow = v_src;
      return;
    }
    for (int d = 0; d < hd; ++d) v[d] = v_src[d];  // inline: no libc call per key
    *vrow = v;
  }
};

// fp16 cache: each entry's key and value widened to F32 (exactly) as it is loaded, then used
// like an F32 cache's entry (the value from its copy). Load is defined per ISA path
// (KVFOLD_TILED_ISA), where the path's conversion inlines.
class F16KvBase : public FloatKv<uint16_t> {
 public:
  F16KvBase(const AttentionArgs& a, int kvh, float* key)
      : FloatKv(a, kvh, a.k_half, a.v_half), key_(key) {}

 protected:
  float* key_;  // [head_dim] the widened key before its rotation
};

// The conversions of the paths (F16C: the AVX2 path requires it, isa.h).
#define KVFOLD_WIDEN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
[[gnu::always_inline]] KVFOLD_WIDEN_AVX512 inline void WidenAvx512(const uint16_t* h, int n,
                                                                   float* f) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(f + i,
                     _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(f + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
  }
}
#undef KVFOLD_WIDEN_AVX512

// x = the 16 values at h, widened: per path, like the Widen functions.
[[gnu::always_inline]] __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline void
Half16Avx512(const uint16_t* h, V16* x) {
  const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
  std::memcpy(x, &f, sizeof(*x));
}

[[gnu::always_inline]] __attribute__((target("avx2,fma,f16c"))) inline void Half16Avx2(
    const uint16_t* h, V16* x) {
  const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8)));
  std::memcpy(x, &lo, sizeof(lo));
  std::memcpy(reinterpret_cast<char*>(x) + sizeof(lo), &hi, sizeof(hi));
}

[[gnu::always_inline]] inline void Half16Portable(const uint16_t* h, V16* x) {
  for (int i = 0; i < 16; ++i) (*x)[i] = Fp16ToFp32(h[i]);
}

// x = the 16 int8 codes at c as F32 (exact): per path, for the INT8 decode tasks over
// several KV heads (attention_tiled.cc).
[[gnu::always_inline]] __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline void
Int8x16Avx512(const int8_t* c, V16* x) {
  const __m512 f = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
  std::memcpy(x, &f, sizeof(*x));
}

[[gnu::always_inline]] __attribute__((target("avx2,fma,f16c"))) inline void Int8x16Avx2(
    const int8_t* c, V16* x) {
  const __m256 lo = _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
  const __m256 hi = _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8))));
  std::memcpy(x, &lo, sizeof(lo));
  std::memcpy(reinterpret_cast<char*>(x) + sizeof(lo), &hi, sizeof(hi));
}

[[gnu::always_inline]] inline void Int8x16Portable(const int8_t* c, V16* x) {
  for (int i = 0; i < 16; ++i) (*x)[i] = static_cast<float>(c[i]);
}

[[gnu::always_inline]] __attribute__((target("avx2,fma,f16c"))) inline void WidenAvx2(
    const uint16_t* h, int n, float* f) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(f + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  }
  for (; i < n; ++i) f[i] = Fp16ToFp32(h[i]);
}

[[gnu::always_inline]] inline void WidenPortable(const uint16_t* h, int n, float* f) {
  for (int i = 0; i < n; ++i) f[i] = Fp16ToFp32(h[i]);
}

// INT8 cache: codes * scales, except a row's own block (its page).
class Int8Kv {
 public:
  Int8Kv(const AttentionArgsI8& a, const AttnRowBlock& block, int kvh, float* key_scales)
      : a_(a), kvh_(kvh), key_scales_(key_scales) {
    for (int r = 0; r < block.num_rows; ++r) {
      const AttnOwnBlock& own = a.own[block.first_row + r];
      if (own.sealed || std::find(open_, open_ + num_open_, own.block) != open_ + num_open_) {
        continue;
      }
      open_[num_open_++] = own.block;
    }
  }

  // Inlined into each ISA's task, so the dequantization loops use its vector registers.
  [[gnu::always_inline]] void Load(const KeyEntry& e, float* krot, float* v, const float** vrow) {
    const int hd = a_.shape.head_dim, kv_dim = a_.shape.num_kv_heads * hd;
    *vrow = v;
    if (num_open_ > 0 && std::find(open_, open_ + num_open_, e.block) != open_ + num_open_) {
      std::fill(krot, krot + hd, 0.0f);  // no code is valid yet: only the page is
      std::fill(v, v + hd, 0.0f);
      return;
    }
    const int c0 = kvh_ * hd;
    if (e.block != scale_block_) {
      const uint16_t* half = a_.k_scales + static_cast<int64_t>(e.block) * kv_dim + c0;
      for (int c = 0; c < hd; ++c) key_scales_[c] = Fp16ToFp32(half[c]);
      scale_block_ = e.block;
    }
    const int64_t slot = e.Slot(a_.shape.block_size);
    const int8_t* kc = a_.k_codes + slot * kv_dim + c0;
    float raw[kMaxHeadDim];
    for (int c = 0; c < hd; ++c) raw[c] = static_cast<float>(kc[c]) * key_scales_[c];
    RotateHalf(raw, a_.rope + static_cast<int64_t>(e.pos) * hd, hd, krot);
    const int8_t* vc = a_.v_codes + slot * kv_dim;
    const uint16_t* vs = a_.v_scales + slot * a_.v_groups;
    for (int c = c0; c < c0 + hd;) {  // one scale per value group
      const int group = c / a_.value_group;
      const float scale = Fp16ToFp32(vs[group]);
      const int end = std::min(c0 + hd, (group + 1) * a_.value_group);
      for (; c < end; ++c) v[c - c0] = static_cast<float>(vc[c]) * scale;
    }
  }

  // Starts reading entry e's key and value codes (one KV head).
  [[gnu::always_inline]] void Prefetch(const KeyEntry& e) const {
    const int64_t off = CodesOffset(a_.shape, e, kvh_);
    PrefetchBytes(a_.k_codes + off, a_.shape.head_dim);
    PrefetchBytes(a_.v_codes + off, a_.shape.head_dim);
  }

  // The tile row `row` reads: `shared`, or a copy with the row's own block from its page.
  const Tile& ForRow(int64_t row, int valid, const Tile& shared, Tile& copy) {
    const AttnOwnBlock& own = a_.own[row];
    bool hit = false;
    for (int i = 0; i < valid && !hit; ++i) hit = shared.entry[i].block == own.block;
    if (!hit) return shared;
    if (copy_block_ == own.block && copy_page_ == own.page && copy.first == shared.first) {
      return copy;
    }
    const int hd = a_.shape.head_dim, kv_dim = a_.shape.num_kv_heads * hd;
    const int hdp = PaddedHeadDim(hd), bs = a_.shape.block_size;
    const size_t key_bytes = static_cast<size_t>(hd) * kTile * sizeof(float);
    std::memcpy(copy.kr, shared.kr, key_bytes);
    if (!RowDots(hd)) std::memcpy(copy.kt, shared.kt, key_bytes);
    std::memcpy(copy.vt, shared.vt, static_cast<size_t>(shared.count) * hdp * sizeof(float));
    for (int i = 0; i < kTile; ++i) copy.vrow[i] = copy.vt + i * hdp;
    copy.first = shared.first;
    copy.count = shared.count;
    for (int i = 0; i < shared.count; ++i) {
      const KeyEntry& e = shared.entry[i];
      copy.entry[i] = e;
      if (e.block != own.block) continue;
      const int64_t off = (static_cast<int64_t>(own.page) * bs + e.offset) * kv_dim + kvh_ * hd;
      float* krot = copy.kr + i * hd;
      RotateHalf(a_.k_pages + off, a_.rope + static_cast<int64_t>(e.pos) * hd, hd, krot);
      if (!RowDots(hd)) {
        for (int d = 0; d < hd; ++d) copy.kt[d * kTile + i] = krot[d];
      }
      std::memcpy(copy.vt + i * hdp, a_.v_pages + off, hd * sizeof(float));
    }
    copy_block_ = own.block;
    copy_page_ = own.page;
    return copy;
  }

 private:
  const AttentionArgsI8& a_;
  int kvh_;
  float* key_scales_;
  int64_t scale_block_ = -1;
  int32_t open_[kAttnMaxBlockRows];
  int num_open_ = 0;
  int32_t copy_block_ = -1, copy_page_ = -1;
};

}  // namespace kvfold::kernels::cpu::tiled

#endif  // KVFOLD_KERNELS_CPU_ATTENTION_KV_H_
