// Tiled paged attention: the optimised kernel for F32, fp16 and INT8 caches alike
// (attention.cc and attention_int8.cc hold the plain references).
//
// Planner: consecutive rows of a call with the same key layout (AttnRow::SameKeyLayout:
// the rows of one sequence in a prefill chunk) form row blocks of up to kAttnMaxBlockRows
// rows; a task is (row block, KV head), except that a call of decode rows (every block one
// row; HeadsShape; for an INT8 cache, value groups of whole 16-lane vectors) runs a task per
// row over several KV heads (RunHeadsTask: the same per-head operations, the tile's
// entries asked for ahead with all their heads). The task
// walks the keys in tiles of kTile key indices [16 t, 16 t + 16) of the rows' shared key
// list: each tile's keys are located in the paged cache, read (F32), widened (fp16) or
// dequantized (INT8: codes * scale, exactly kernels/quant's DequantizeKeys /
// DequantizeValues) and ROTATED ONCE into the tile's key rows (for head_dim <
// kRowDotHeadDim also transposed; values stay rows: F32 ones with head_dim a multiple of
// 16 are read where they lie, others copied), then every row of the block that sees keys
// of the tile updates its online softmax (running max m, sum l, accumulator acc) with
// them:
//   s = scale * q.k, masked past the row's keys; q.k per key is, by head_dim (the shape
//     alone decides): below kRowDotHeadDim a sequential sum over head_dim (one lane per
//     key of the transposed tile), else 16-lane chunk products added in chunk order and
//     their lanes summed by a fixed tree (SumLanes: no transposition, whole vectors)
//   m' = max(m, max s); a = exp(m - m'); p = exp(s - m')
//   l = l * a + sum p (fixed tree);  acc = acc * a + sum_k p_k v_k, the tile's sum kept
//   in four partial sums (key k into k % 4) added as (0 + 1) + (2 + 3)
// and out = acc * (1 / l).
//
// A slice of the keys (AttentionPart, F32): the task starts at tile key_begin / 16 from the
// (m, l, acc) the slice before stored and stores them again where it stops, so slices
// run one after another give the bits of one call over all keys.
//
// INT8: a row reads the entries of its OWN block F32 from the block's page
// (docs/contracts.md, "Bitwise rule"). When a tile holds entries of a row's own block, the
// row uses a copy of the tile with those entries taken from the page (rows sharing the own
// block share the copy). Entries of open blocks (own, not sealed) are never dequantized:
// their codes are not valid, and only their own rows see them.
//
// The tiles a row visits and every operation on them depend only on that row (its key
// count and its data), never on the other rows or the block: prefill and decode give the
// same bits, and an INT8 row equals the F32 kernel's row on a cache holding the
// dequantized entries. Vector code uses GCC vector extensions without FMA contraction
// (-ffp-contract=off), so the AVX-512, AVX2 and portable builds (stamped out below with
// target attributes) give identical bits too.
// GCC 12's AVX-512 conversion intrinsics (the fp16 loader's, attention_kv.h, inlined here)
// read an undefined vector: false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/fp16.h"
#include "kernels/cpu/attention_keys.h"
#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/attention_lanes.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec16.h"

namespace kvfold::kernels::cpu {
namespace {

using namespace tiled;  // NOLINT: the tile and loaders of this kernel (attention_kv.h)

// The state of one (row, query head) while its keys are visited.
struct RowState {
  float m, l;
};

// One row's online-softmax update with one tile, for the `group` query heads of a KV head.
struct RowUpdate {
  const float* q;  // [group, head_dim] the row's rotated queries of this KV head
  const Tile* tile;
  int valid;  // the row sees columns [0, valid) of the tile
  int group, head_dim;
  float scale;
  RowState* st;  // [group]
  float* acc;    // [group, hdp]
};

// What a task needs besides its cache: the call's rows and the task's place.
struct Task {
  const AttnRow* rows;
  const int32_t* block_tables;
  const float* q;     // [n, num_heads * head_dim]
  float* out;         // [n, num_heads * head_dim]
  const float* rope;  // [rope_rows, head_dim]
  AttentionShape shape;
  AttnRowBlock block;
  int kvh;
  int kvh_end;                // KV heads [kvh, kvh_end): more than one only for one-row blocks
  const AttentionPart* part;  // nullptr: all keys
  // Decode tasks over several KV heads (RunHeadsTask): prefetch_only asks for the task's
  // first tiles and returns (RunTasks runs it for the next task of a thread's range just
  // before the current one); prefetched says that happened, so the task does not ask
  // again.
  bool prefetch_only = false;
  bool prefetched = false;
};

// Whether a task runs RunHeadsTask (a decode row over several KV heads) rather than RunTask.
inline bool HeadsTaskOf(const Task& t) { return t.kvh_end - t.kvh > 1; }

// Per-thread memory of a task.
struct TaskBuffers {
  Tile shared;        // the tile every row of the block uses
  Tile own;           // INT8: a row's copy with its own block's entries from the page
  float* acc;         // [max(kAttnMaxBlockRows * group, num_heads), hdp]
  RowState* st;       // [max(kAttnMaxBlockRows * group, num_heads)]
  float* key_scales;  // [head_dim] INT8: the F32 key scales of the last block dequantized
  float* key_f32;     // [head_dim] fp16: the widened key
  float* heads;       // RunHeadsTask's scores (HeadsFloats)
  int32_t* vector_groups;  // [kv_dim / 16] INT8, RunHeadsTask: Int8Heads' value groups
  float* value_scales;     // INT8, RunHeadsTask: the tile's value scales (ValueScaleFloats)
};

// One task: tiles of the block's keys, each row's online softmax, the normalised output.
// Inlined into the per-ISA wrappers below so the loads compile for that ISA as well.
template <class Kv, class Update>
[[gnu::always_inline]] inline void RunTask(const Task& t, Kv& kv, TaskBuffers& b, Update update) {
  const AttentionShape& sh = t.shape;
  const int hd = sh.head_dim, q_dim = sh.num_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads, hdp = PaddedHeadDim(hd);
  const float ninf = -std::numeric_limits<float>::infinity();
  int nk_max = 0;
  int64_t probe = t.block.first_row;
  for (int r = 0; r < t.block.num_rows; ++r) {
    const int nk = t.rows[t.block.first_row + r].num_keys();
    if (nk > nk_max) {
      nk_max = nk;
      probe = t.block.first_row + r;
    }
    for (int gh = 0; gh < group; ++gh) {
      b.st[r * group + gh] = RowState{ninf, 0.0f};
      std::fill(b.acc + (r * group + gh) * hdp, b.acc + (r * group + gh + 1) * hdp, 0.0f);
    }
  }
  // A slice: continue each (row, head) from its stored state.
  const int key_begin = t.part == nullptr ? 0 : static_cast<int>(t.part->key_begin);
  const int key_end =
      t.part == nullptr ? nk_max : static_cast<int>(std::min<int64_t>(t.part->key_end, nk_max));
  auto state_of = [&](int r, int gh) {
    return t.part->state + ((t.block.first_row + r) * sh.num_heads + t.kvh * group + gh) * (hd + 2);
  };
  if (key_begin > 0 && key_begin >= key_end) return;  // normalised by an earlier slice
  if (key_begin > 0) {
    for (int r = 0; r < t.block.num_rows; ++r) {
      for (int gh = 0; gh < group; ++gh) {
        const float* s = state_of(r, gh);
        b.st[r * group + gh] = RowState{s[0], s[1]};
        std::copy(s + 2, s + 2 + hd, b.acc + (r * group + gh) * hdp);
      }
    }
  }
  const RowKeys keys(t.rows[probe], t.block_tables, sh.block_size);
  Tile& tile = b.shared;
  b.own.first = -1;
  // The next tile's entries are located and requested while this one is read and used.
  KeyEntry next[kTile];
  auto locate_tile = [&](int t0) {
    for (int i = t0; i < std::min(t0 + kTile, nk_max); ++i) {
      next[i - t0] = keys.Locate(i);
      kv.Prefetch(next[i - t0]);
    }
  };
  locate_tile(key_begin);
  for (int t0 = key_begin; t0 < key_end; t0 += kTile) {
    tile.first = t0;
    tile.count = std::min(kTile, nk_max - t0);
    std::copy(next, next + tile.count, tile.entry);
    if (t0 + kTile < key_end) locate_tile(t0 + kTile);
    for (int i = 0; i < tile.count; ++i) {
      kv.Load(tile.entry[i], tile.kr + i * hd, tile.vt + i * hdp, &tile.vrow[i]);
    }
    std::fill(tile.kr + tile.count * hd, tile.kr + kTile * hd, 0.0f);
    if (!RowDots(hd)) TransposeKeys(tile.kr, hd, tile.kt);
    for (int r = 0; r < t.block.num_rows; ++r) {
      const int64_t row = t.block.first_row + r;
      const int nk = t.rows[row].num_keys();
      if (nk <= t0) continue;
      const int valid = std::min(kTile, nk - t0);
      const Tile& use = kv.ForRow(row, valid, tile, b.own);
      update(RowUpdate{t.q + row * q_dim + t.kvh * group * hd, &use, valid, group, hd, sh.scale,
                       b.st + r * group, b.acc + r * group * hdp});
    }
  }
  if (key_end < nk_max) {  // the slice stops inside the block's keys
    for (int r = 0; r < t.block.num_rows; ++r) {
      for (int gh = 0; gh < group; ++gh) {
        float* s = state_of(r, gh);
        s[0] = b.st[r * group + gh].m;
        s[1] = b.st[r * group + gh].l;
        std::copy(b.acc + (r * group + gh) * hdp, b.acc + (r * group + gh) * hdp + hd, s + 2);
      }
    }
    return;
  }
  for (int r = 0; r < t.block.num_rows; ++r) {
    for (int gh = 0; gh < group; ++gh) {
      const float inv = 1.0f / b.st[r * group + gh].l;
      const float* acc = b.acc + (r * group + gh) * hdp;
      float* out = t.out + (t.block.first_row + r) * q_dim + (t.kvh * group + gh) * hd;
      for (int d = 0; d < hd; ++d) out[d] = acc[d] * inv;
    }
  }
}

// Where AccumulateValues reads key i's 16-lane chunk c of values. RowValues: value rows of
// F32 (RunTask's tile: vrow[i] + d0); ReaderValues: a decode task's value sources, head h
// from channel d0 on (RunHeadsTask: the reader's Get with the ISA path's widening
// functions).
struct RowValues {
  const float* const* vrow;
  int d0;
  [[gnu::always_inline]] void Get(int i, int c, V16* x) const {
    std::memcpy(x, vrow[i] + d0 + 16 * c, sizeof(*x));
  }
};
template <class Src, class F1, class F2>
struct ReaderValues {
  const Src* vs;
  int h, d0;
  F1 f1;
  F2 f2;
  [[gnu::always_inline]] void Get(int i, int c, V16* x) const {
    vs[i].Get(h, d0 + 16 * c, x, f1, f2);
  }
};

// part[c][k] += w * (key i's C 16-lane chunks).
template <int C, class Values>
[[gnu::always_inline]] inline void AddKeyValues(V16 (&part)[C][4], int k, float w, const Values& v,
                                                int i) {
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    V16 x;
    v.Get(i, c, &x);
    part[c][k] = part[c][k] + w * x;
  }
}

// acc[0, 16 C) = acc * alpha + the tile's sum of w_i * v_i over keys [0, valid), the sum
// kept in four partial sums per 16 lanes (key i into part i % 4, in key order) added as
// (0 + 1) + (2 + 3). A pass covers C chunks (up to 64 values, 16 partial sums in
// registers), so each w_i is broadcast once per pass instead of once per chunk. Each
// lane's operations are the same whatever C and wherever the values are read from.
template <int C, class Values>
[[gnu::always_inline]] inline void AccumulateValues(const Values& v, const float* w, int valid,
                                                    float alpha, float* acc) {
  V16 part[C][4];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) part[c][k] = V16{};
  }
  int i = 0;
  for (; i + 4 <= valid; i += 4) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) AddKeyValues<C>(part, k, w[i + k], v, i + k);
  }
  // The last 0..3 keys, into parts 0..rest-1.
  for (int k = 0; k < 3 && i + k < valid; ++k) AddKeyValues<C>(part, k, w[i + k], v, i + k);
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    V16 av;
    std::memcpy(&av, acc + 16 * c, sizeof(av));
    av = av * alpha + ((part[c][0] + part[c][1]) + (part[c][2] + part[c][3]));
    std::memcpy(acc + 16 * c, &av, sizeof(av));
  }
}

// A key whose logit is this far below the row's running maximum weighs less than
// e^-64 ~ 1.6e-28 of the maximum's key: it counts as 0 (and so does a running sum whose
// maximum moved up that far). Below float resolution against the maximum's weight 1, it
// would only feed denormal products p * v into the sums, each a slow microcode assist
// (long contexts are mostly such keys: the kernel ran about 2x slower).
constexpr float kNegligibleLogit = -64.0f;

// Lane i: q . key i, a sequential sum over head_dim (kt: the transposed tile).
[[gnu::always_inline]] inline void TileScores(const float* q, const float* kt, int hd, V16* out) {
  V16 s = V16{};
  for (int d = 0; d < hd; ++d) {
    V16 k;
    std::memcpy(&k, kt + d * kTile, sizeof(k));
    s = s + q[d] * k;
  }
  *out = s;
}

// Lane i: q . key i as 16 lanes of chunk products (chunk c of 16 dims, added in chunk
// order; the last chunk's lanes past hd are 0), then the lanes summed by SumLanes (kr: the
// key rows). Keys past count score 0.
[[gnu::always_inline]] inline void RowDotScores(const float* q, const float* kr, int hd, int count,
                                                V16* out) {
  const int whole = hd / 16, tail = hd % 16;
  V16 qc[kMaxHeadDim / 16 + 1];
  for (int c = 0; c < whole; ++c) std::memcpy(&qc[c], q + 16 * c, sizeof(V16));
  qc[whole] = V16{};
  for (int l = 0; l < tail; ++l) qc[whole][l] = q[16 * whole + l];
  V16 p[kTile];
  for (int i = 0; i < kTile; ++i) {
    p[i] = V16{};
    if (i >= count) continue;
    const float* k = kr + i * hd;
    for (int c = 0; c < whole; ++c) {
      V16 kc;
      std::memcpy(&kc, k + 16 * c, sizeof(V16));
      p[i] = c == 0 ? qc[c] * kc : p[i] + qc[c] * kc;
    }
    if (tail > 0) {
      V16 kc = V16{};
      for (int l = 0; l < tail; ++l) kc[l] = k[16 * whole + l];
      p[i] = whole == 0 ? qc[whole] * kc : p[i] + qc[whole] * kc;
    }
  }
  SumLanes(p);
  *out = p[0];
}

// 16 floats at src into *x, and x to dst (no alignment needed).
[[gnu::always_inline]] inline void Get(const float* src, V16* x) {
  std::memcpy(x, src, sizeof(*x));
}
[[gnu::always_inline]] inline void Put(float* dst, const V16& x) {
  std::memcpy(dst, &x, sizeof(x));
}

// One row's online-softmax step over a tile, for one query head: s (lane i: q . key i,
// unscaled; lanes >= valid are masked) turns into the tile's weights *p, st moves on, and
// the returned factor rescales the row's earlier sums:
//   s = scale * s, masked to -inf past valid;  m' = max(m, max s);  a = exp(m - m');
//   p = exp(s - m') (0 below kNegligibleLogit);  l = l * a + sum p (fixed tree).
template <class Exp>
[[gnu::always_inline]] inline float TileSoftmax(const V16& dots, int valid, float scale,
                                                RowState& st, Exp exp16, V16* p_out) {
  const float ninf = -std::numeric_limits<float>::infinity();
  V16 lane;
  for (int i = 0; i < kTile; ++i) lane[i] = static_cast<float>(i);
  const auto mask = lane < static_cast<float>(valid);
  V16 s = dots * scale;
  s = mask ? s : V16{} + ninf;
  float mt = s[0];
  for (int i = 1; i < kTile; ++i) mt = std::max(mt, s[i]);
  const float m_new = std::max(st.m, mt);
  const float gap = st.m - m_new;
  const float alpha = st.m == ninf || gap < kNegligibleLogit ? 0.0f : std::exp(gap);
  V16 p = s - m_new;
  const auto kept = p >= kNegligibleLogit;  // masked lanes are -inf
  exp16(&p);
  p = kept ? p : V16{};
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = p[i] + p[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  const float psum = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  st.l = st.l * alpha + psum;
  st.m = m_new;
  *p_out = p;
  return alpha;
}

// RunHeadsTask's per-thread floats: the kTile score vectors of each of a KV head's `group`
// query heads.
inline size_t HeadsFloats(int group) { return static_cast<size_t>(group) * kTile * 16; }

// Int8Heads' F32 value scales of a tile's entries: per entry, the scales of the groups the
// task's heads cover (at most kv_dim / 16 + 1 of them: groups of whole 16-lane vectors),
// rounded up to whole 16-lane vectors.
inline int64_t ValueScaleStride(int64_t kv_dim) { return (kv_dim / 16 + 1 + 15) / 16 * 16; }
inline size_t ValueScaleFloats(int64_t kv_dim) {
  return static_cast<size_t>(kTile * ValueScaleStride(kv_dim));
}

// Whether a shape takes RunHeadsTask for its decode rows: the head sizes it is compiled
// for (key-row scores, keys rotated 16 lanes at a time).
inline bool HeadsShape(int head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

// RunHeadsTask's prefetches ask for L2 only (PrefetchBytes): a tile's bytes arrive while
// the tile before is computed, and the task then reads them head by head from L2.
constexpr int kHeadsLocality = 1;
// How many tiles ahead of the tile that reads them RunHeadsTask asks for entries (1 and 2
// measured alike, 4 slower).
constexpr int kAhead = 1;

// The caches RunHeadsTask reads: for an entry, channel d of head h (0 .. heads) of the
// task's KV heads [kvh, kvh_end), keys or values, as 16 F32 lanes (Src::Get), and the
// prefetch of an entry's keys or values. Get takes the ISA path's widening functions as
// arguments (f1, f2), which the path passes down by value like load16 before: once the
// task is inlined into the path's function they are constants and inline too.
//
// F32 or fp16 cache: an entry's heads lie HeadStride apart (a block is head-major), each
// head's channels contiguous; f1 reads 16 of them.
template <class T>
class FloatHeads {
 public:
  FloatHeads(const Task& t, const T* k, const T* v)
      : sh_(t.shape),
        kvh_(t.kvh),
        heads_(t.kvh_end - t.kvh),
        stride_(HeadStride(t.shape)),
        k_(k),
        v_(v) {}
  struct Src {
    const T* p;
    int64_t stride;
    template <class F1, class F2>
    [[gnu::always_inline]] void Get(int h, int d, V16* x, F1 f1, F2) const {
      f1(p + h * stride + d, x);
    }
  };
  [[gnu::always_inline]] Src Keys(const KeyEntry& e) const {
    return {k_ + HeadOffset(sh_, e, kvh_), stride_};
  }
  template <class F2>
  [[gnu::always_inline]] Src Values(const KeyEntry& e, int, F2) const {
    return {v_ + HeadOffset(sh_, e, kvh_), stride_};
  }
  [[gnu::always_inline]] void PrefetchKeys(const KeyEntry& e) const { Prefetch(k_, e); }
  [[gnu::always_inline]] void PrefetchValues(const KeyEntry& e) const { Prefetch(v_, e); }

 private:
  // The entry's head_dim channels of each of the task's heads.
  [[gnu::always_inline]] void Prefetch(const T* cache, const KeyEntry& e) const {
    const T* p = cache + HeadOffset(sh_, e, kvh_);
    for (int h = 0; h < heads_; ++h) {
      PrefetchBytes<kHeadsLocality>(p + h * stride_, sh_.head_dim * int64_t{sizeof(T)});
    }
  }

  const AttentionShape& sh_;
  int kvh_;
  int heads_;
  int64_t stride_;
  const T* k_;
  const T* v_;
};

// INT8 cache (value groups of whole 16-lane vectors: Int8HeadsShape): an entry of the row's
// own block is read F32 from the block's page, as Int8Kv::ForRow does, any other entry as
// its codes times its scales (keys: the block's scale per channel; values: the entry's
// scale per group), the products of Int8Kv::Load. So a row gets Int8Kv's tiles, bit for
// bit. Get's f1 / f2 widen 16 codes / 16 fp16 scales. The value group of each 16-lane
// vector of the task's heads is looked up in `vector_groups` (filled here, once per task),
// not divided out per vector of every entry, and an entry's group scales are widened once
// when the tile locates it (Values: tile slot i's in `value_scales`), not per vector.
class Int8Heads {
 public:
  Int8Heads(const Task& t, const AttentionArgsI8& a, int32_t* vector_groups, float* value_scales)
      : a_(a),
        kv_dim_(int64_t{t.shape.num_kv_heads} * t.shape.head_dim),
        c0_(int64_t{t.kvh} * t.shape.head_dim),
        elems_(int64_t{t.kvh_end - t.kvh} * t.shape.head_dim),
        bs_(t.shape.block_size),
        hd_(t.shape.head_dim),
        own_(a.own[t.block.first_row]),
        g0_(c0_ / a.value_group),
        groups_((c0_ + elems_ - 1) / a.value_group - g0_ + 1),
        scale_stride_(ValueScaleStride(kv_dim_)),
        vector_groups_(vector_groups),
        value_scales_(value_scales) {
    if (t.prefetch_only) return;  // reads no values
    for (int64_t v = 0; v < elems_ / 16; ++v) {
      vector_groups[v] = static_cast<int32_t>((c0_ + 16 * v) / a.value_group - g0_);
    }
  }
  // Get(h, d): element j = h * head_dim + d of the task's heads (an entry's heads lie side
  // by side in the codes, the scales and the page).
  struct KeySrc {
    const int8_t* codes;
    const uint16_t* scales;
    const float* page;  // the own block's entry, else nullptr
    int hd;
    template <class F1, class F2>
    [[gnu::always_inline]] void Get(int h, int d, V16* x, F1 codes16, F2 half16) const {
      const int j = h * hd + d;
      if (page != nullptr) {
        std::memcpy(x, page + j, sizeof(*x));
        return;
      }
      V16 c, sc;
      codes16(codes + j, &c);
      half16(scales + j, &sc);
      *x = c * sc;
    }
  };
  struct ValueSrc {
    const int8_t* codes;
    const float* scales;           // the entry's group scales, F32, from the task's first group
    const int32_t* vector_groups;  // the group of element 16 v (v = 0, 1, ...) in scales
    const float* page;
    int hd;
    template <class F1, class F2>
    [[gnu::always_inline]] void Get(int h, int d, V16* x, F1 codes16, F2) const {
      const int j = h * hd + d;
      if (page != nullptr) {
        std::memcpy(x, page + j, sizeof(*x));
        return;
      }
      V16 c;
      codes16(codes + j, &c);
      *x = c * scales[vector_groups[j / 16]];
    }
  };
  [[gnu::always_inline]] KeySrc Keys(const KeyEntry& e) const {
    return {a_.k_codes + e.Slot(bs_) * kv_dim_ + c0_,
            a_.k_scales + int64_t{e.block} * kv_dim_ + c0_, Page(a_.k_pages, e), hd_};
  }
  // Entry e's values for tile slot i: its group scales widened (f2, 16 at a time) into the
  // slot's row of value_scales, unless the entry is read from the own block's page.
  template <class F2>
  [[gnu::always_inline]] ValueSrc Values(const KeyEntry& e, int i, F2 half16) const {
    const int64_t slot = e.Slot(bs_);
    const float* page = Page(a_.v_pages, e);
    float* scales = value_scales_ + i * scale_stride_;
    if (page == nullptr) {
      const uint16_t* src = a_.v_scales + slot * a_.v_groups + g0_;
      for (int64_t g = 0; g < groups_; g += 16) {
        uint16_t h[16] = {};
        std::memcpy(h, src + g, std::min<int64_t>(16, groups_ - g) * sizeof(uint16_t));
        V16 x;
        half16(h, &x);
        std::memcpy(scales + g, &x, sizeof(x));
      }
    }
    return {a_.v_codes + slot * kv_dim_ + c0_, scales, vector_groups_, page, hd_};
  }
  // A block's key scales are asked for with its first entry (all its entries share them).
  [[gnu::always_inline]] void PrefetchKeys(const KeyEntry& e) const {
    if (const float* page = Page(a_.k_pages, e)) {
      PrefetchBytes<kHeadsLocality>(page, elems_ * int64_t{sizeof(float)});
      return;
    }
    PrefetchBytes<kHeadsLocality>(a_.k_codes + e.Slot(bs_) * kv_dim_ + c0_, elems_);
    if (e.offset == 0) {
      PrefetchBytes<kHeadsLocality>(a_.k_scales + int64_t{e.block} * kv_dim_ + c0_,
                                    elems_ * int64_t{2});
    }
  }
  [[gnu::always_inline]] void PrefetchValues(const KeyEntry& e) const {
    if (const float* page = Page(a_.v_pages, e)) {
      PrefetchBytes<kHeadsLocality>(page, elems_ * int64_t{sizeof(float)});
      return;
    }
    const int64_t slot = e.Slot(bs_);
    PrefetchBytes<kHeadsLocality>(a_.v_codes + slot * kv_dim_ + c0_, elems_);
    PrefetchBytes<kHeadsLocality>(a_.v_scales + slot * a_.v_groups + g0_,
                                  groups_ * int64_t{sizeof(uint16_t)});
  }

 private:
  // The entry in the page of the row's own block, or nullptr for another block's entry.
  [[gnu::always_inline]] const float* Page(const float* pages, const KeyEntry& e) const {
    if (e.block != own_.block) return nullptr;
    return pages + (int64_t{own_.page} * bs_ + e.offset) * kv_dim_ + c0_;
  }

  const AttentionArgsI8& a_;
  int64_t kv_dim_, c0_, elems_;
  int bs_, hd_;
  AttnOwnBlock own_;
  int64_t g0_;            // the value group of the task's first element
  int64_t groups_;        // value groups the task's heads cover
  int64_t scale_stride_;  // floats per tile slot in value_scales_
  const int32_t* vector_groups_;
  float* value_scales_;
};

// Whether an INT8 cache's decode rows take RunHeadsTask: a value group covers whole
// 16-lane vectors of a head, so 16 values share one scale.
inline bool Int8HeadsShape(int value_group) { return value_group > 0 && value_group % 16 == 0; }

// Lane l of *out: q . kr over the C chunks (chunk c of 16 dims, added in chunk order).
template <int C>
[[gnu::always_inline]] inline void ChunkProducts(const V16 (&q)[C], const V16 (&kr)[C], V16* out) {
  V16 p = q[0] * kr[0];
#pragma GCC unroll 16
  for (int c = 1; c < C; ++c) p = p + q[c] * kr[c];
  *out = p;
}

// A task of one row over KV heads [kvh, kvh_end) (a decode row: its block has no other
// rows; HeadsShape). While a tile is computed, the task asks for the keys and values of
// the next one (kAhead), all its heads of an entry together, spread over the tile's heads
// and into L2 (kHeadsLocality); the first tile was asked for before the task before it
// ran (Task::prefetch_only). The tile is then computed head by head from cache, each
// head's keys and values of the tile's entries (located once per tile): in an F32 or fp16
// cache, whose blocks are head-major, a head's entries of a block are one contiguous run
// (docs/engine.md, "KV block layout"). Per head, the operations of RunTask with Update, in
// the same order: the scores' chunk products of the rotated key (RotatePieceInRegisters)
// summed by SumLanes, TileSoftmax, and the value sums by key i into part i % 4, in registers
// (AccumulateValues, 64 values a pass). So the same bits. rd: the cache (FloatHeads
// or Int8Heads), f1 and f2 the ISA path's widening functions its Get takes.
template <int kChunks, class Reader, class Exp, class F1, class F2>
[[gnu::always_inline]] inline void RunHeadsTask(const Task& t, const Reader& rd, TaskBuffers& b,
                                                Exp exp16, F1 f1, F2 f2) {
  constexpr int chunks = kChunks, hd = 16 * kChunks, half = hd / 2;
  const AttentionShape& sh = t.shape;
  const int q_dim = sh.num_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads, hdp = PaddedHeadDim(hd);
  const int heads = t.kvh_end - t.kvh, qh = heads * group;
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t row = t.block.first_row;
  const int nk = t.rows[row].num_keys();
  const float* q = t.q + row * q_dim + t.kvh * group * hd;  // the task's query heads, in order
  float* scores = b.heads;                                  // [group][kTile][16]
  const RowKeys keys(t.rows[row], t.block_tables, sh.block_size);
  // Entries [0, asked) were prefetched: kAhead tiles before the tile that reads them.
  int asked = std::min(nk, kAhead * kTile);
  if (t.prefetch_only || !t.prefetched) {
    for (int i = 0; i < asked; ++i) {
      const KeyEntry e = keys.Locate(i);
      rd.PrefetchKeys(e);
      rd.PrefetchValues(e);
    }
    if (t.prefetch_only) return;
  }
  for (int j = 0; j < qh; ++j) {
    b.st[j] = RowState{ninf, 0.0f};
    std::fill(b.acc + j * hdp, b.acc + (j + 1) * hdp, 0.0f);
  }
  // The tile's entries as the reader's key and value sources, and their rope rows.
  using KeySrc = decltype(rd.Keys(KeyEntry{}));
  using ValueSrc = decltype(rd.Values(KeyEntry{}, 0, f2));
  KeySrc ks[kTile];
  ValueSrc vs[kTile];
  const float* cs[kTile];
  for (int t0 = 0; t0 < nk; t0 += kTile) {
    const int count = std::min(kTile, nk - t0);
    for (int i = 0; i < count; ++i) {
      const KeyEntry e = keys.Locate(t0 + i);
      ks[i] = rd.Keys(e);
      vs[i] = rd.Values(e, i, f2);
      cs[i] = t.rope + static_cast<int64_t>(e.pos) * hd;
    }
    const int ask_end = std::min(nk, t0 + (kAhead + 1) * kTile), ask_begin = asked;
    for (int h = 0; h < heads; ++h) {
      for (const int upto = ask_begin + (ask_end - ask_begin) * (h + 1) / heads; asked < upto;
           ++asked) {
        const KeyEntry e = keys.Locate(asked);
        rd.PrefetchKeys(e);
        rd.PrefetchValues(e);
      }
      // Scores: per entry, the head's key rotated by the entry's position, its chunk
      // products with each of the head's queries (held in registers over the tile when
      // the KV head has one).
      V16 qc[chunks];
      for (int c = 0; c < chunks; ++c) Get(q + h * group * hd + 16 * c, &qc[c]);
      for (int i = 0; i < count; ++i) {
        V16 kr[chunks];
#pragma GCC unroll 8
        for (int i0 = 0; i0 < half; i0 += 16) {
          V16 lo, hi;
          ks[i].Get(h, i0, &lo, f1, f2);
          ks[i].Get(h, half + i0, &hi, f1, f2);
          RotatePieceInRegisters(lo, hi, cs[i], i0, half, &kr[i0 / 16], &kr[(half + i0) / 16]);
        }
        V16 p;
        ChunkProducts(qc, kr, &p);
        Put(scores + i * 16, p);
        for (int gh = 1; gh < group; ++gh) {
          V16 qg[chunks];
          for (int c = 0; c < chunks; ++c) Get(q + (h * group + gh) * hd + 16 * c, &qg[c]);
          ChunkProducts(qg, kr, &p);
          Put(scores + (gh * kTile + i) * 16, p);
        }
      }
      // Per query head: the tile's softmax, then its weighted values.
      for (int gh = 0; gh < group; ++gh) {
        const int j = h * group + gh;
        V16 p[kTile];
        for (int i = 0; i < kTile; ++i) {
          p[i] = V16{};
          if (i < count) Get(scores + (gh * kTile + i) * 16, &p[i]);
        }
        SumLanes(p);
        V16 wv;
        const float alpha = TileSoftmax(p[0], count, sh.scale, b.st[j], exp16, &wv);
        float w[kTile];
        std::memcpy(w, &wv, sizeof(w));
        float* acc = b.acc + j * hdp;
        int d0 = 0;
        for (; d0 + 64 <= hd; d0 += 64) {
          const ReaderValues<ValueSrc, F1, F2> v{vs, h, d0, f1, f2};
          AccumulateValues<4>(v, w, count, alpha, acc + d0);
        }
        for (; d0 < hd; d0 += 16) {
          const ReaderValues<ValueSrc, F1, F2> v{vs, h, d0, f1, f2};
          AccumulateValues<1>(v, w, count, alpha, acc + d0);
        }
      }
    }
  }
  for (int j = 0; j < qh; ++j) {
    const float inv = 1.0f / b.st[j].l;
    const float* acc = b.acc + j * hdp;
    float* out = t.out + row * q_dim + (t.kvh * group + j) * hd;
    for (int d = 0; d < hd; ++d) out[d] = acc[d] * inv;
  }
}

// The per-ISA code: the row update, and the F32 / fp16 / INT8 tasks that inline RunTask
// (WIDEN, HALF16: the path's fp16 conversions; CODES16: its int8 one).
#define KVFOLD_TILED_ISA(NS, ATTR, WIDEN, HALF16, CODES16)                                   \
  namespace NS {                                                                             \
  KVFOLD_EXP16(ATTR)                                                                         \
  ATTR static inline void Update(const RowUpdate& u) {                                       \
    const int hd = u.head_dim, hdp = PaddedHeadDim(hd);                                      \
    for (int gh = 0; gh < u.group; ++gh) {                                                   \
      const float* q = u.q + gh * hd;                                                        \
      V16 s, p;                                                                              \
      if (RowDots(hd)) {                                                                     \
        RowDotScores(q, u.tile->kr, hd, u.tile->count, &s);                                  \
      } else {                                                                               \
        TileScores(q, u.tile->kt, hd, &s);                                                   \
      }                                                                                      \
      const float alpha = TileSoftmax(s, u.valid, u.scale, u.st[gh], Exp16, &p);             \
      float w[kTile];                                                                        \
      std::memcpy(w, &p, sizeof(w));                                                         \
      float* acc = u.acc + gh * hdp;                                                         \
      int d0 = 0;                                                                            \
      for (; d0 + 64 <= hdp; d0 += 64) {                                                     \
        AccumulateValues<4>(RowValues{u.tile->vrow, d0}, w, u.valid, alpha, acc + d0);       \
      }                                                                                      \
      for (; d0 < hdp; d0 += 16) {                                                           \
        AccumulateValues<1>(RowValues{u.tile->vrow, d0}, w, u.valid, alpha, acc + d0);       \
      }                                                                                      \
    }                                                                                        \
  }                                                                                          \
  ATTR static inline void LoadF32(const float* p, V16* x) { std::memcpy(x, p, sizeof(*x)); } \
  /* RunHeadsTask for the task's head_dim (HeadsShape); f1, f2 as rd's Get takes them. */    \
  template <class Reader, class F1, class F2>                                                \
  ATTR static inline void HeadsTask(const Task& t, const Reader& rd, TaskBuffers& b, F1 f1,  \
                                    F2 f2) {                                                 \
    switch (t.shape.head_dim) {                                                              \
      case 32:                                                                               \
        return RunHeadsTask<2>(t, rd, b, Exp16, f1, f2);                                     \
      case 64:                                                                               \
        return RunHeadsTask<4>(t, rd, b, Exp16, f1, f2);                                     \
      case 96:                                                                               \
        return RunHeadsTask<6>(t, rd, b, Exp16, f1, f2);                                     \
      case 128:                                                                              \
        return RunHeadsTask<8>(t, rd, b, Exp16, f1, f2);                                     \
      default:                                                                               \
        return RunHeadsTask<16>(t, rd, b, Exp16, f1, f2);                                    \
    }                                                                                        \
  }                                                                                          \
  ATTR void TaskF32(const Task& t, const AttentionArgs& a, TaskBuffers& b) {                 \
    if (HeadsTaskOf(t)) {                                                                    \
      HeadsTask(t, FloatHeads<float>(t, a.k_cache, a.v_cache), b, LoadF32, LoadF32);         \
      return;                                                                                \
    }                                                                                        \
    F32Kv kv(a, t.kvh);                                                                      \
    RunTask(t, kv, b, Update);                                                               \
  }                                                                                          \
  struct F16Kv : F16KvBase {                                                                 \
    using F16KvBase::F16KvBase;                                                              \
    ATTR inline void Load(const KeyEntry& e, float* krot, float* v, const float** vrow) {    \
      const int hd = a_.shape.head_dim;                                                      \
      const int64_t off = HeadOffset(a_.shape, e, kvh_);                                     \
      const float* cs = a_.rope + static_cast<int64_t>(e.pos) * hd;                          \
      if (VectorRotation(hd)) {                                                              \
        const uint16_t* k = k_ + off;                                                        \
        for (int i = 0; i < hd / 2; i += 16) {                                               \
          V16 lo, hi;                                                                        \
          HALF16(k + i, &lo);                                                                \
          HALF16(k + hd / 2 + i, &hi);                                                       \
          RotatePiece(lo, hi, cs, i, hd / 2, krot);                                          \
        }                                                                                    \
      } else {                                                                               \
        WIDEN(k_ + off, hd, key_);                                                           \
        RotateHalf(key_, cs, hd, krot);                                                      \
      }                                                                                      \
      WIDEN(v_ + off, hd, v);                                                                \
      *vrow = v;                                                                             \
    }                                                                                        \
  };                                                                                         \
  ATTR void TaskF16(const Task& t, const AttentionArgs& a, TaskBuffers& b) {                 \
    if (HeadsTaskOf(t)) {                                                                    \
      HeadsTask(t, FloatHeads<uint16_t>(t, a.k_half, a.v_half), b, HALF16, HALF16);          \
      return;                                                                                \
    }                                                                                        \
    F16Kv kv(a, t.kvh, b.key_f32);                                                           \
    RunTask(t, kv, b, Update);                                                               \
  }                                                                                          \
  ATTR void TaskI8(const Task& t, const AttentionArgsI8& a, TaskBuffers& b) {                \
    if (HeadsTaskOf(t)) {                                                                    \
      HeadsTask(t, Int8Heads(t, a, b.vector_groups, b.value_scales), b, CODES16, HALF16);    \
      return;                                                                                \
    }                                                                                        \
    Int8Kv kv(a, t.block, t.kvh, b.key_scales);                                              \
    RunTask(t, kv, b, Update);                                                               \
  }                                                                                          \
  }  // namespace NS

KVFOLD_TILED_ISA(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), WidenAvx512,
                 Half16Avx512, Int8x16Avx512)
KVFOLD_TILED_ISA(avx2, __attribute__((target("avx2,fma,f16c"))), WidenAvx2, Half16Avx2, Int8x16Avx2)
KVFOLD_TILED_ISA(portable, , WidenPortable, Half16Portable, Int8x16Portable)
#undef KVFOLD_TILED_ISA

// The planner: row blocks of consecutive rows with the same key layout. Returns the
// number of (row, key) pairs of the call.
int64_t PlanRowBlocks(const AttnRow* rows, int64_t n, std::vector<AttnRowBlock>& blocks) {
  blocks.clear();
  int64_t work = 0;
  for (int64_t r = 0; r < n; ++r) {
    work += rows[r].num_keys();
    if (blocks.empty() || blocks.back().num_rows == kAttnMaxBlockRows ||
        !rows[blocks.back().first_row].SameKeyLayout(rows[r])) {
      blocks.push_back({r, 0});
    }
    ++blocks.back().num_rows;
  }
  return work;
}

// Plans the call, sizes the per-thread buffers (they only grow) and runs
// task_fn(Task, TaskBuffers&) for every (row block, KV head), on the pool when the call
// is large enough to pay for it.
template <class TaskFn>
void RunTasks(ThreadPool& pool, const Task& proto, int64_t n, AttentionScratch& scratch,
              bool heads_tasks, TaskFn task_fn) {
  const AttentionShape& sh = proto.shape;
  const int hd = sh.head_dim, hdp = PaddedHeadDim(hd);
  const int group = sh.num_heads / sh.num_kv_heads;
  const int64_t work = PlanRowBlocks(proto.rows, n, scratch.blocks);
  const int threads = pool.num_threads();
  const int64_t num_blocks = static_cast<int64_t>(scratch.blocks.size());
  // KV heads per task: one, or, when every block is one row (decode), as many as leave
  // about one task per thread (all of them for a batch of 16 rows on 2 threads, 6 for one
  // row: one row of 96 keys took 0.15-0.16 ms against 0.18 with two tasks per thread). The
  // grouping only decides which task does what: each head's operations stay the same.
  int heads_per_task = 1;
  if (heads_tasks && proto.part == nullptr && num_blocks == n && HeadsShape(hd)) {
    heads_per_task = static_cast<int>(
        std::clamp<int64_t>(sh.num_kv_heads * num_blocks / int64_t{threads}, 1, sh.num_kv_heads));
  }
  const int head_groups = (sh.num_kv_heads + heads_per_task - 1) / heads_per_task;
  if (scratch.per_thread.size() < static_cast<size_t>(threads)) scratch.per_thread.resize(threads);
  if (scratch.per_thread_groups.size() < static_cast<size_t>(threads)) {
    scratch.per_thread_groups.resize(threads);
  }
  const size_t tile_floats = static_cast<size_t>(kTile) * (2 * hd + hdp);
  const size_t state_rows = std::max<size_t>(kAttnMaxBlockRows * group, sh.num_heads);
  const size_t state_floats = state_rows * (hdp + 2);
  const int64_t kv_dim = int64_t{sh.num_kv_heads} * hd;
  const size_t heads_floats =
      heads_per_task > 1 ? HeadsFloats(group) + ValueScaleFloats(kv_dim) : 0;
  // Int8Heads' value group per 16-lane vector of a task's heads (head_dim % 16 == 0).
  const size_t group_ints = heads_per_task > 1 ? static_cast<size_t>(sh.num_kv_heads) * hd / 16 : 0;
  const size_t per_thread = 2 * tile_floats + state_floats + 2 * hd + heads_floats;
  for (auto& buf : scratch.per_thread) {
    if (buf.size() < per_thread) buf.resize(per_thread);
  }
  for (auto& buf : scratch.per_thread_groups) {
    if (buf.size() < group_ints) buf.resize(group_ints);
  }
  auto body = [&](int64_t t0, int64_t t1, int thread) {
    float* buf = scratch.per_thread[thread].data();
    TaskBuffers b;
    b.heads = buf + 2 * tile_floats + state_floats + 2 * hd;
    b.value_scales = b.heads + HeadsFloats(group);
    b.vector_groups = scratch.per_thread_groups[thread].data();
    for (Tile* tile : {&b.shared, &b.own}) {
      tile->kr = buf + (tile == &b.own ? tile_floats : 0);
      tile->kt = tile->kr + kTile * hd;
      tile->vt = tile->kt + kTile * hd;
    }
    b.acc = buf + 2 * tile_floats;
    b.st = reinterpret_cast<RowState*>(b.acc + state_rows * hdp);
    b.key_scales = buf + 2 * tile_floats + state_floats;
    b.key_f32 = b.key_scales + hd;
    auto task_at = [&](int64_t i) {
      Task t = proto;
      t.block = scratch.blocks[i / head_groups];
      t.kvh = static_cast<int>(i % head_groups) * heads_per_task;
      t.kvh_end = std::min(sh.num_kv_heads, t.kvh + heads_per_task);
      return t;
    };
    // Decode tasks over several KV heads: the next task's first tiles are asked for
    // before this task runs, so they arrive while it computes.
    const bool ahead = heads_per_task > 1;
    for (int64_t i = t0; i < t1; ++i) {
      if (ahead && i + 1 < t1) {
        Task next = task_at(i + 1);
        next.prefetch_only = true;
        if (HeadsTaskOf(next)) task_fn(next, b);
      }
      Task t = task_at(i);
      t.prefetched = ahead && i > t0;  // read only by RunHeadsTask
      task_fn(t, b);
    }
  };
  const int64_t tasks = num_blocks * head_groups;
  if (work * sh.num_heads * hd < (1 << 16)) {
    body(0, tasks, 0);
  } else {
    pool.ParallelFor(tasks, 1, body);
  }
}

// The task of the active ISA path over every (row block, KV head) of the call.
template <class Args>
using TaskFn = void (*)(const Task&, const Args&, TaskBuffers&);
template <class Args>
void Run(ThreadPool& pool, const Args& a, AttentionScratch& scratch, const AttentionPart* part,
         bool heads_tasks, TaskFn<Args> avx512_task, TaskFn<Args> avx2_task,
         TaskFn<Args> portable_task) {
  const Isa isa = ActiveIsa();
  const TaskFn<Args> task = isa == Isa::kAvx512 ? avx512_task
                            : isa == Isa::kAvx2 ? avx2_task
                                                : portable_task;
  const Task proto{a.rows, a.block_tables, a.q, a.out, a.rope, a.shape, {}, 0, 1, part};
  RunTasks(pool, proto, a.n, scratch, heads_tasks,
           [&](const Task& t, TaskBuffers& b) { task(t, a, b); });
}

}  // namespace

void AttentionOptimized(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch,
                        const AttentionPart* part) {
  if (a.k_half != nullptr) {
    Run(pool, a, scratch, part, true, avx512::TaskF16, avx2::TaskF16, portable::TaskF16);
  } else {
    Run(pool, a, scratch, part, true, avx512::TaskF32, avx2::TaskF32, portable::TaskF32);
  }
}

void AttentionInt8Optimized(ThreadPool& pool, const AttentionArgsI8& a, AttentionScratch& scratch) {
  Run(pool, a, scratch, nullptr, Int8HeadsShape(a.value_group), avx512::TaskI8, avx2::TaskI8,
      portable::TaskI8);
}

}  // namespace kvfold::kernels::cpu
