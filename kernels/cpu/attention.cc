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

#include "kernels/cpu/cpu_ops.h"

namespace kvfold::kernels::cpu {
namespace {

struct KeyRef {
  const AttentionArgs& a;
  const int32_t* row;
  int kv_dim;

  int num_keys() const {
    return row[kAttnPrefixVisible] + (row[kAttnMainHi] - row[kAttnMainLo]);
  }
  // Offset (in floats) of key/value entry `idx` (0-based over prefix then main) of head 0,
  // and its position.
  int64_t Locate(int idx, int* pos) const {
    const int bs = a.shape.block_size;
    int64_t slot;
    int32_t block;
    const int prefix_visible = row[kAttnPrefixVisible];
    if (idx < prefix_visible) {
      block = a.block_tables[row[kAttnPrefixTable] + idx / bs];
      slot = idx % bs;
      *pos = row[kAttnPrefixPosBase] + idx * row[kAttnPrefixPosStride];
    } else {
      const int j = row[kAttnMainLo] + (idx - prefix_visible);
      const int64_t s = static_cast<int64_t>(row[kAttnMainFront]) + j;
      block = a.block_tables[row[kAttnMainTable] + s / bs];
      slot = s % bs;
      *pos = row[kAttnMainPosLo] + (j - row[kAttnMainLo]);
    }
    return (static_cast<int64_t>(block) * bs + slot) * kv_dim;
  }
};

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

__attribute__((target("avx2,fma"))) float DotAvx2(const float* x, const float* y, int n) {
  __m256 acc = _mm256_setzero_ps();
  int d = 0;
  for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  for (; d < n; ++d) s = __builtin_fmaf(x[d], y[d], s);
  return s;
}

float DotPortable(const float* x, const float* y, int n) {
  float lanes[8] = {};
  int d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) lanes[l] = __builtin_fmaf(x[d + l], y[d + l], lanes[l]);
  float s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  for (; d < n; ++d) s = __builtin_fmaf(x[d], y[d], s);
  return s;
}

__attribute__((target("avx2,fma"))) void AxpyAvx2(float p, const float* v, float* out, int n) {
  const __m256 pv = _mm256_set1_ps(p);
  int d = 0;
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(out + d)));
  for (; d < n; ++d) out[d] = __builtin_fmaf(p, v[d], out[d]);
}

void AxpyPortable(float p, const float* v, float* out, int n) {
  for (int d = 0; d < n; ++d) out[d] = __builtin_fmaf(p, v[d], out[d]);
}

}  // namespace

void AttentionOptimized(ThreadPool& pool, const AttentionArgs& a,
                        std::vector<std::vector<float>>& scratch) {
  const AttentionShape& sh = a.shape;
  const int hd = sh.head_dim;
  const int q_dim = sh.num_heads * hd;
  const int kv_dim = sh.num_kv_heads * hd;
  const int group = sh.num_heads / sh.num_kv_heads;
  const bool avx2 = CpuHasAvx2Fma();
  auto dot = avx2 ? DotAvx2 : DotPortable;
  auto axpy = avx2 ? AxpyAvx2 : AxpyPortable;
  if (scratch.size() < static_cast<size_t>(pool.num_threads())) scratch.resize(pool.num_threads());
  // One task = (row, kv head): each key is rotated once and scored for the whole group.
  const int64_t tasks = a.n * sh.num_kv_heads;
  int64_t total_keys = 0;
  for (int64_t r = 0; r < a.n; ++r) total_keys += KeyRef{a, a.rows + r * kAttnRowFields, kv_dim}.num_keys();
  auto body = [&](int64_t t0, int64_t t1, int thread) {
    std::vector<float>& buf = scratch[thread];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / sh.num_kv_heads;
      const int kvh = static_cast<int>(t % sh.num_kv_heads);
      KeyRef keys{a, a.rows + r * kAttnRowFields, kv_dim};
      const int nk = keys.num_keys();
      const size_t need = static_cast<size_t>(group) * nk + hd;
      if (buf.size() < need) buf.resize(need);
      float* scores = buf.data();       // [group, nk]
      float* krot = buf.data() + static_cast<size_t>(group) * nk;
      const float* q0 = a.q + r * q_dim + kvh * group * hd;
      for (int idx = 0; idx < nk; ++idx) {
        int pos;
        const int64_t off = keys.Locate(idx, &pos);
        RotateHalf(a.k_cache + off + kvh * hd, a.rope + static_cast<int64_t>(pos) * hd, hd, krot);
        for (int g = 0; g < group; ++g) scores[g * nk + idx] = dot(q0 + g * hd, krot, hd) * sh.scale;
      }
      for (int g = 0; g < group; ++g) {
        float* s = scores + g * nk;
        float max_score = -std::numeric_limits<float>::infinity();
        for (int idx = 0; idx < nk; ++idx) max_score = std::max(max_score, s[idx]);
        float sum = 0.0f;
        for (int idx = 0; idx < nk; ++idx) {
          s[idx] = std::exp(s[idx] - max_score);
          sum += s[idx];
        }
        const float inv = 1.0f / sum;
        for (int idx = 0; idx < nk; ++idx) s[idx] *= inv;
        std::memset(a.out + r * q_dim + (kvh * group + g) * hd, 0, hd * sizeof(float));
      }
      for (int idx = 0; idx < nk; ++idx) {
        int pos;
        const float* v = a.v_cache + keys.Locate(idx, &pos) + kvh * hd;
        for (int g = 0; g < group; ++g)
          axpy(scores[g * nk + idx], v, a.out + r * q_dim + (kvh * group + g) * hd, hd);
      }
    }
  };
  if (total_keys * sh.num_heads * hd < (1 << 15)) {
    body(0, tasks, 0);
  } else {
    pool.ParallelFor(tasks, 1, body);
  }
}

}  // namespace kvfold::kernels::cpu
