// Tiled paged attention (the optimised F32 path; attention.cc has the reference).
//
// Rows of a call that share a key layout (same prefix rule and visible prefix, same main
// table, front, lo and position of lo: the rows of one sequence in a prefill chunk) form
// a group; a task is (block of up to kRowBlock rows of one group, kv head). The task walks
// the keys in tiles of kTile key indices [16 t, 16 t + 16) of the row's own key list:
// each tile's keys are located in the paged cache and ROTATED ONCE into a transposed
// tile, then every row of the block that sees keys of the tile updates its online
// softmax (running max m, sum l, accumulator acc) with them:
//   s = scale * q.k (per key: sequential sum over head_dim), masked past the row's keys
//   m' = max(m, max s); a = exp(m - m'); p = exp(s - m')
//   l = l * a + sum p (fixed tree);  acc = acc * a + sum_k p_k v_k, the tile's sum kept
//   in four partial sums (key k into k % 4) added as (0 + 1) + (2 + 3)
// and out = acc * (1 / l). The tiles a row visits and every operation on them depend only
// on that row (its key count and data), never on the other rows or the block: prefill
// and decode give the same bits. Vector code uses GCC vector extensions without FMA
// contraction (-ffp-contract=off), so the AVX-512, AVX2 and portable builds of the
// kernel (stamped out below with target attributes) give identical bits too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"

namespace kvfold::kernels::cpu {
namespace {

using KeyRef = attention_simd::KeyRefT<AttentionArgs>;

constexpr int kTile = 16;
constexpr int kRowBlock = 32;

typedef float V16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));

// Value rows and accumulators are padded to whole 16-lane vectors.
inline int PaddedHeadDim(int head_dim) { return (head_dim + 15) / 16 * 16; }

// The state of one (row, query head) while its keys are visited.
struct RowState {
  float m, l;
};

struct TaskArgs {
  const AttentionArgs* a;
  int64_t row0;   // first row of the block
  int rows;       // rows in the block (all of one group)
  int kvh;
  float* kt;      // [head_dim, kTile] rotated keys of the tile, transposed
  float* vt;      // [kTile, hdp] values of the tile, zero-padded to hdp = PaddedHeadDim
  float* acc;     // [rows * group, hdp]
  RowState* st;   // [rows * group]
};

// Cephes expf on 16 lanes, as plain vector arithmetic (no FMA): identical bits on every
// ISA. Inputs below -87.3 give ~1e-38, not 0: callers mask.
#define KVFOLD_EXP16(ATTR)                                                                      \
  ATTR static inline void Exp16(V16* inout) {                                                 \
    V16 x = *inout;                                                                           \
    const V16 lo = V16{} - 87.3f, hi = V16{} + 88.3f;                                         \
    x = x < lo ? lo : x;                                                                      \
    x = x > hi ? hi : x;                                                                      \
    const V16 fx0 = x * 1.44269504088896341f + 0.5f;                                          \
    V16 fx = __builtin_convertvector(__builtin_convertvector(fx0, I16), V16);                 \
    fx = fx > fx0 ? fx - 1.0f : fx;                                                           \
    x = x - fx * 0.693359375f;                                                                \
    x = x - fx * -2.12194440e-4f;                                                             \
    V16 y = V16{} + 1.9875691500e-4f;                                                         \
    y = y * x + 1.3981999507e-3f;                                                             \
    y = y * x + 8.3334519073e-3f;                                                             \
    y = y * x + 4.1665795894e-2f;                                                             \
    y = y * x + 1.6666665459e-1f;                                                             \
    y = y * x + 5.0000001201e-1f;                                                             \
    y = y * (x * x) + (x + 1.0f);                                                             \
    const I16 e = (__builtin_convertvector(fx, I16) + 127) << 23;                             \
    *inout = y * __builtin_bit_cast(V16, e);                                                  \
  }

// One task. Stamped out per ISA (target attribute) so the vector code uses its registers.
#define KVFOLD_TILED_TASK(NS, ATTR)                                                           \
  namespace NS {                                                                              \
  KVFOLD_EXP16(ATTR)                                                                          \
  ATTR static void Task(const TaskArgs& t) {                                                  \
    const AttentionArgs& a = *t.a;                                                            \
    const AttentionShape& sh = a.shape;                                                       \
    const int hd = sh.head_dim, q_dim = sh.num_heads * hd, kv_dim = sh.num_kv_heads * hd;     \
    const int group = sh.num_heads / sh.num_kv_heads;                                         \
    const int hdp = PaddedHeadDim(hd);                                                        \
    const float ninf = -std::numeric_limits<float>::infinity();                               \
    int nk_max = 0;                                                                           \
    int64_t probe_row = t.row0;                                                               \
    for (int r = 0; r < t.rows; ++r) {                                                        \
      const int nk = KeyRef{a, a.rows + (t.row0 + r) * kAttnRowFields, kv_dim}.num_keys();    \
      if (nk > nk_max) {                                                                      \
        nk_max = nk;                                                                          \
        probe_row = t.row0 + r;                                                               \
      }                                                                                       \
      for (int gh = 0; gh < group; ++gh) {                                                    \
        t.st[r * group + gh] = RowState{ninf, 0.0f};                                          \
        std::fill(t.acc + (r * group + gh) * hdp, t.acc + (r * group + gh + 1) * hdp, 0.0f);  \
      }                                                                                       \
    }                                                                                         \
    const KeyRef keys{a, a.rows + probe_row * kAttnRowFields, kv_dim};                        \
    float krot[1024];                                                                         \
    for (int t0 = 0; t0 < nk_max; t0 += kTile) {                                              \
      const int cnt = std::min(kTile, nk_max - t0);                                           \
      for (int i = 0; i < kTile; ++i) {                                                       \
        if (i < cnt) {                                                                        \
          int pos;                                                                            \
          const int64_t off = keys.Locate(t0 + i, &pos) + t.kvh * hd;                         \
          RotateHalf(a.k_cache + off, a.rope + static_cast<int64_t>(pos) * hd, hd, krot);     \
          for (int d = 0; d < hd; ++d) t.kt[d * kTile + i] = krot[d];                         \
          const float* v_src = a.v_cache + off;                                               \
          for (int d = 0; d < hd; ++d) t.vt[i * hdp + d] = v_src[d]; /* inline: no call */     \
        } else {                                                                              \
          for (int d = 0; d < hd; ++d) t.kt[d * kTile + i] = 0.0f;                            \
        }                                                                                     \
      }                                                                                       \
      V16 lane;                                                                               \
      for (int i = 0; i < kTile; ++i) lane[i] = static_cast<float>(i);                        \
      for (int r = 0; r < t.rows; ++r) {                                                      \
        const int64_t row = t.row0 + r;                                                       \
        const int nk = KeyRef{a, a.rows + row * kAttnRowFields, kv_dim}.num_keys();           \
        if (nk <= t0) continue;                                                               \
        const int valid = std::min(kTile, nk - t0);                                           \
        const auto mask = lane < static_cast<float>(valid);                                   \
        for (int gh = 0; gh < group; ++gh) {                                                  \
          const float* q = a.q + row * q_dim + (t.kvh * group + gh) * hd;                     \
          V16 s = V16{};                                                                      \
          for (int d = 0; d < hd; ++d) {                                                      \
            V16 k;                                                                            \
            std::memcpy(&k, t.kt + d * kTile, sizeof(k));                                     \
            s = s + q[d] * k;                                                                 \
          }                                                                                   \
          s = s * sh.scale;                                                                   \
          s = mask ? s : V16{} + ninf;                                                        \
          float mt = s[0];                                                                    \
          for (int i = 1; i < kTile; ++i) mt = std::max(mt, s[i]);                            \
          RowState& st = t.st[r * group + gh];                                                \
          const float m_new = std::max(st.m, mt);                                             \
          const float alpha = st.m == ninf ? 0.0f : std::exp(st.m - m_new);                   \
          V16 p = s - m_new;                                                                  \
          Exp16(&p);                                                                          \
          p = mask ? p : V16{};                                                               \
          float s8[8], s4[4];                                                                 \
          for (int i = 0; i < 8; ++i) s8[i] = p[i] + p[i + 8];                                \
          for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];                              \
          const float psum = (s4[0] + s4[2]) + (s4[1] + s4[3]);                               \
          st.l = st.l * alpha + psum;                                                         \
          st.m = m_new;                                                                       \
          float* acc = t.acc + (r * group + gh) * hdp;                                        \
          for (int d0 = 0; d0 < hdp; d0 += 16) {                                              \
            V16 part[4] = {};                                                                 \
            for (int i = 0; i < valid; ++i) {                                                 \
              V16 v;                                                                          \
              std::memcpy(&v, t.vt + i * hdp + d0, sizeof(v));                                \
              part[i & 3] = part[i & 3] + p[i] * v;                                           \
            }                                                                                 \
            V16 av;                                                                           \
            std::memcpy(&av, acc + d0, sizeof(av));                                           \
            av = av * alpha + ((part[0] + part[1]) + (part[2] + part[3]));                    \
            std::memcpy(acc + d0, &av, sizeof(av));                                           \
          }                                                                                   \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
    for (int r = 0; r < t.rows; ++r) {                                                        \
      for (int gh = 0; gh < group; ++gh) {                                                    \
        const float inv = 1.0f / t.st[r * group + gh].l;                                      \
        const float* acc = t.acc + (r * group + gh) * hdp;                                    \
        float* out = a.out + (t.row0 + r) * q_dim + (t.kvh * group + gh) * hd;                \
        for (int d = 0; d < hd; ++d) out[d] = acc[d] * inv;                                   \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
  }  // namespace NS

KVFOLD_TILED_TASK(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))))
KVFOLD_TILED_TASK(avx2, __attribute__((target("avx2,fma"))))
KVFOLD_TILED_TASK(portable, )
#undef KVFOLD_TILED_TASK
#undef KVFOLD_EXP16

// Rows that see the same keys at the same indices (see the file comment).
bool SameKeys(const int32_t* a, const int32_t* b) {
  return a[kAttnPrefixTable] == b[kAttnPrefixTable] && a[kAttnPrefixVisible] == b[kAttnPrefixVisible] &&
         a[kAttnPrefixPosBase] == b[kAttnPrefixPosBase] &&
         a[kAttnPrefixPosStride] == b[kAttnPrefixPosStride] && a[kAttnMainTable] == b[kAttnMainTable] &&
         a[kAttnMainFront] == b[kAttnMainFront] && a[kAttnMainLo] == b[kAttnMainLo] &&
         a[kAttnMainPosLo] == b[kAttnMainPosLo];
}

}  // namespace

void AttentionOptimized(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch) {
  const AttentionShape& sh = a.shape;
  const int hd = sh.head_dim;
  const int group = sh.num_heads / sh.num_kv_heads;
  // Row blocks: consecutive rows with the same keys, at most kRowBlock each.
  auto& blocks = scratch.groups;  // per block: first row, rows
  blocks.clear();
  int64_t work = 0;
  for (int64_t r = 0; r < a.n; ++r) {
    const int32_t* row = a.rows + r * kAttnRowFields;
    work += row[kAttnPrefixVisible] + (row[kAttnMainHi] - row[kAttnMainLo]);
    if (blocks.empty() || blocks.back()[1] == kRowBlock ||
        !SameKeys(a.rows + static_cast<int64_t>(blocks.back()[0]) * kAttnRowFields, row)) {
      blocks.push_back({static_cast<int>(r), 0, 0, 0, 0});
    }
    ++blocks.back()[1];
  }
  const int threads = pool.num_threads();
  if (scratch.per_thread.size() < static_cast<size_t>(threads)) scratch.per_thread.resize(threads);
  const int hdp = PaddedHeadDim(hd);
  const size_t per_thread = static_cast<size_t>(kTile) * (hd + hdp) + static_cast<size_t>(kRowBlock) * group * hdp +
                            static_cast<size_t>(kRowBlock) * group * 2;
  for (auto& buf : scratch.per_thread) {
    if (buf.size() < per_thread) buf.resize(per_thread);
  }
  const Isa isa = ActiveIsa();
  auto task = isa == Isa::kAvx512 ? avx512::Task : isa == Isa::kAvx2 ? avx2::Task : portable::Task;
  auto body = [&](int64_t t0, int64_t t1, int thread) {
    float* buf = scratch.per_thread[thread].data();
    for (int64_t t = t0; t < t1; ++t) {
      const auto& b = blocks[t / sh.num_kv_heads];
      float* vt = buf + kTile * hd;
      float* acc = vt + kTile * hdp;
      TaskArgs args{&a, b[0], b[1], static_cast<int>(t % sh.num_kv_heads), buf, vt, acc,
                    reinterpret_cast<RowState*>(acc + kRowBlock * group * hdp)};
      task(args);
    }
  };
  const int64_t tasks = static_cast<int64_t>(blocks.size()) * sh.num_kv_heads;
  if (work * sh.num_heads * hd < (1 << 16)) {
    body(0, tasks, 0);
  } else {
    pool.ParallelFor(tasks, 1, body);
  }
}

}  // namespace kvfold::kernels::cpu
