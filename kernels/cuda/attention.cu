#include "kernels/cuda/attention.cuh"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_status.h"

namespace kvfold::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;  // keys per tile; == warp size (the softmax step relies on it)
constexpr int kDimsPerThread = kAttnMaxHeadDim / kThreads;
constexpr int kTargetBlocks = 1024;  // enough blocks to fill an H100/H200 several times
constexpr int kMaxSplits = 64;

// Where channel ch of the entry at `slot` lies in the cache: a float cache is head-major
// within a block ([num_blocks, num_kv_heads, block_size, head_dim], kernels::FloatKvIndex),
// INT8 codes are [num_blocks * block_size, kv_dim].
__device__ __forceinline__ int64_t CacheIndex(const AttentionParams& p, int64_t slot, int ch,
                                              int kv_dim) {
  if (p.cache_type == core::DType::kI8) return slot * kv_dim + ch;
  return kernels::FloatKvIndex(slot, ch / p.head_dim, ch % p.head_dim, p.num_kv_heads, p.block_size,
                               p.head_dim);
}

// Element (slot, channel) of a cache, dequantized when int8. from_page: `slot` indexes the
// F32 pages instead (the row's own block, AttentionParams::own).
__device__ __forceinline__ float LoadKey(const AttentionParams& p, int64_t slot, int32_t block,
                                         bool from_page, int ch, int kv_dim) {
  if (from_page) return p.k_pages[slot * kv_dim + ch];
  float k = LoadElem(p.k_cache, CacheIndex(p, slot, ch, kv_dim), p.cache_type);
  if (p.cache_type == core::DType::kI8) {
    const int64_t i = static_cast<int64_t>(block) * kv_dim + ch;
    k *= p.fp16_scales ? __half2float(static_cast<const __half*>(p.k_scale)[i])
                       : static_cast<const float*>(p.k_scale)[i];
  }
  return k;
}

__device__ __forceinline__ float LoadValue(const AttentionParams& p, int64_t slot,
                                           bool from_page, int ch, int kv_dim) {
  if (from_page) return p.v_pages[slot * kv_dim + ch];
  float v = LoadElem(p.v_cache, CacheIndex(p, slot, ch, kv_dim), p.cache_type);
  if (p.cache_type == core::DType::kI8) {
    const int groups = (kv_dim + p.v_group_size - 1) / p.v_group_size;
    const int64_t i = slot * groups + ch / p.v_group_size;
    v *= p.fp16_scales ? __half2float(static_cast<const __half*>(p.v_scale)[i])
                       : static_cast<const float*>(p.v_scale)[i];
  }
  return v;
}

// grid (num_rows, num_kv_heads, num_splits), block kThreads,
// dynamic shared memory: group * head_dim floats (the group's queries).
// num_splits == 1: writes normalised rows to p.out. Otherwise per split:
//   ws_ml  [num_rows, num_heads, num_splits, 2]          (running max, sum of exp)
//   ws_acc [num_rows, num_heads, num_splits, head_dim]   (unnormalised weighted values)
__global__ void __launch_bounds__(kThreads)
    AttentionPartialKernel(const AttentionParams p, int num_splits, float* ws_ml,
                           float* ws_acc) {
  extern __shared__ float q_s[];  // [group, head_dim]
  __shared__ float prob_s[kAttnMaxGroup][kTile];
  __shared__ float max_s[kAttnMaxGroup], sum_s[kAttnMaxGroup], corr_s[kAttnMaxGroup];
  __shared__ int64_t slot_s[kTile];  // physical slot of each key of the tile, -1 = none
  __shared__ int32_t block_s[kTile];
  __shared__ int32_t pos_s[kTile];
  __shared__ bool page_s[kTile];  // the key is in the row's own block: read from its page

  const int row = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = p.num_heads / p.num_kv_heads;
  const int head_dim = p.head_dim, half = head_dim / 2;
  const int kv_dim = p.num_kv_heads * head_dim;
  const int bs = p.block_size;

  const kernels::AttnRow r = p.rows[row];
  const int prefix_visible = max(r.prefix_visible, 0);
  const int total = prefix_visible + max(r.main_hi - r.main_lo, 0);
  // INT8 engine cache: the row's own block (read F32 from its page), -1 = none.
  const int32_t own_block = p.own == nullptr ? -1 : p.own[row].block;
  const int32_t own_page = p.own == nullptr ? -1 : p.own[row].page;

  // This split's key range: equal shares rounded up to whole tiles.
  const int share = ((total + num_splits - 1) / num_splits + kTile - 1) / kTile * kTile;
  const int begin = split * share;
  const int end = min(total, begin + share);

  const float* q_row = p.q + (static_cast<int64_t>(row) * p.num_heads +
                              static_cast<int64_t>(kv_head) * group) * head_dim;
  for (int i = tid; i < group * head_dim; i += kThreads) q_s[i] = q_row[i];
  if (tid < group) {
    max_s[tid] = -INFINITY;
    sum_s[tid] = 0.0f;
  }
  float acc[kDimsPerThread][kAttnMaxGroup];
#pragma unroll
  for (int di = 0; di < kDimsPerThread; ++di) {
#pragma unroll
    for (int g = 0; g < kAttnMaxGroup; ++g) acc[di][g] = 0.0f;
  }
  __syncthreads();

  for (int t0 = begin; t0 < end; t0 += kTile) {
    // 1. Resolve the tile's keys to physical slots and positions.
    if (tid < kTile) {
      const int k = t0 + tid;
      int64_t slot = -1;
      int32_t block = 0, pos = 0;
      bool from_page = false;
      if (k < end) {
        int phys, table;
        if (k < prefix_visible) {
          phys = k;
          table = r.prefix_table;
          pos = r.prefix_pos_base + k * r.prefix_pos_stride;
        } else {
          const int j = r.main_lo + (k - prefix_visible);
          phys = r.main_front + j;
          table = r.main_table;
          pos = r.main_pos_lo + (j - r.main_lo);
        }
        block = p.block_tables[static_cast<int64_t>(table) + phys / bs];
        from_page = block == own_block && own_block >= 0;
        slot = static_cast<int64_t>(from_page ? own_page : block) * bs + phys % bs;
        pos = min(max(pos, 0), p.rope_rows - 1);
      }
      slot_s[tid] = slot;
      block_s[tid] = block;
      pos_s[tid] = pos;
      page_s[tid] = from_page;
    }
    __syncthreads();

    // 2. Scores: one warp per key, lanes over rotation pairs (i, i + half).
    for (int j = warp; j < kTile; j += kWarps) {
      const int64_t slot = slot_s[j];
      float part[kAttnMaxGroup];
#pragma unroll
      for (int g = 0; g < kAttnMaxGroup; ++g) part[g] = 0.0f;
      if (slot >= 0) {
        const float* cs = p.rope_table + static_cast<int64_t>(pos_s[j]) * head_dim;
        const int ch0 = kv_head * head_dim;
        for (int i = lane; i < half; i += 32) {
          const float k0 = LoadKey(p, slot, block_s[j], page_s[j], ch0 + i, kv_dim);
          const float k1 = LoadKey(p, slot, block_s[j], page_s[j], ch0 + i + half, kv_dim);
          const float c = cs[i], s = cs[half + i];
          const float r0 = k0 * c - k1 * s;
          const float r1 = k1 * c + k0 * s;
#pragma unroll
          for (int g = 0; g < kAttnMaxGroup; ++g) {
            if (g < group) part[g] += q_s[g * head_dim + i] * r0 + q_s[g * head_dim + i + half] * r1;
          }
        }
      }
#pragma unroll
      for (int g = 0; g < kAttnMaxGroup; ++g) {
        if (g < group) {
          const float dot = WarpSum(part[g]);
          if (lane == 0) prob_s[g][j] = slot >= 0 ? dot * p.scale : -INFINITY;
        }
      }
    }
    __syncthreads();

    // 3. Online softmax: one warp per query head, lanes over the tile's keys.
    for (int g = warp; g < group; g += kWarps) {
      const float score = prob_s[g][lane];
      const float m_old = max_s[g];
      const float m_new = fmaxf(m_old, WarpMax(score));
      const float prob = score == -INFINITY ? 0.0f : expf(score - m_new);
      const float corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
      const float tile_sum = WarpSum(prob);
      prob_s[g][lane] = prob;
      if (lane == 0) {
        sum_s[g] = sum_s[g] * corr + tile_sum;
        max_s[g] = m_new;
        corr_s[g] = corr;
      }
    }
    __syncthreads();

    // 4. Weighted values: each thread owns head dims tid, tid + kThreads for every head.
    const int n = min(kTile, end - t0);
#pragma unroll
    for (int di = 0; di < kDimsPerThread; ++di) {
      const int d = tid + di * kThreads;
      if (d < head_dim) {
#pragma unroll
        for (int g = 0; g < kAttnMaxGroup; ++g) {
          if (g < group) acc[di][g] *= corr_s[g];
        }
        for (int j = 0; j < n; ++j) {
          const float v = LoadValue(p, slot_s[j], page_s[j], kv_head * head_dim + d, kv_dim);
#pragma unroll
          for (int g = 0; g < kAttnMaxGroup; ++g) {
            if (g < group) acc[di][g] += prob_s[g][j] * v;
          }
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int g = 0; g < kAttnMaxGroup; ++g) {
    if (g >= group) continue;
    const int64_t head_row = static_cast<int64_t>(row) * p.num_heads + kv_head * group + g;
    if (num_splits == 1) {
      const float inv = sum_s[g] > 0.0f ? 1.0f / sum_s[g] : 0.0f;
#pragma unroll
      for (int di = 0; di < kDimsPerThread; ++di) {
        const int d = tid + di * kThreads;
        if (d < head_dim) p.out[head_row * head_dim + d] = acc[di][g] * inv;
      }
    } else {
      const int64_t part_idx = head_row * num_splits + split;
#pragma unroll
      for (int di = 0; di < kDimsPerThread; ++di) {
        const int d = tid + di * kThreads;
        if (d < head_dim) ws_acc[part_idx * head_dim + d] = acc[di][g];
      }
      if (tid == 0) {
        ws_ml[part_idx * 2] = max_s[g];
        ws_ml[part_idx * 2 + 1] = sum_s[g];
      }
    }
  }
}

// grid (num_rows, num_heads), block kThreads: merges the splits of one (row, head).
__global__ void __launch_bounds__(kThreads)
    AttentionCombineKernel(int num_splits, int head_dim,
                           const float* ws_ml,   // [num_rows, num_heads, num_splits, 2]
                           const float* ws_acc,  // [num_rows, num_heads, num_splits, head_dim]
                           float* out) {         // [num_rows, num_heads, head_dim]
  const int64_t head_row = static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y;
  const float* ml = ws_ml + head_row * num_splits * 2;
  float m = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, ml[2 * s]);
  float total = 0.0f;
  if (m != -INFINITY) {
    for (int s = 0; s < num_splits; ++s) {
      if (ml[2 * s] != -INFINITY) total += ml[2 * s + 1] * expf(ml[2 * s] - m);
    }
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const float* acc = ws_acc + head_row * num_splits * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      if (ml[2 * s] != -INFINITY) o += acc[s * head_dim + d] * expf(ml[2 * s] - m);
    }
    out[head_row * head_dim + d] = o * inv;
  }
}

size_t SplitBytes(int32_t num_rows, int32_t num_heads, int32_t head_dim, int32_t num_splits) {
  return static_cast<size_t>(num_rows) * num_heads * num_splits * (head_dim + 2) * sizeof(float);
}

}  // namespace

int32_t AttentionNumSplits(int32_t num_rows, int32_t num_kv_heads) {
  const int64_t blocks = static_cast<int64_t>(num_rows) * num_kv_heads;
  if (blocks <= 0 || blocks >= kTargetBlocks) return 1;
  return static_cast<int32_t>(std::min<int64_t>(kMaxSplits, (kTargetBlocks + blocks - 1) / blocks));
}

size_t AttentionWorkspaceBytes(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim) {
  if (num_kv_heads <= 0 || num_heads <= 0) return 0;
  // With more than one split, rows * kv_heads < kTargetBlocks and
  // splits <= ceil(kTargetBlocks / (rows * kv_heads)), so rows * kv_heads * splits < 2 *
  // kTargetBlocks.
  const int32_t group = num_heads / num_kv_heads;
  return static_cast<size_t>(2 * kTargetBlocks) * group * (head_dim + 2) * sizeof(float);
}

absl::Status Attention(const AttentionParams& p, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream) {
  if (p.num_rows < 0) return absl::InvalidArgumentError("Attention: negative num_rows");
  if (p.num_rows == 0) return absl::OkStatus();
  if (p.num_heads <= 0 || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 ||
      p.num_heads / p.num_kv_heads > kAttnMaxGroup) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Attention: num_heads ", p.num_heads, " / num_kv_heads ", p.num_kv_heads,
        " must be a whole group of at most ", kAttnMaxGroup));
  }
  if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.head_dim > kAttnMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: head_dim ", p.head_dim, " must be even and <= ",
                     kAttnMaxHeadDim));
  }
  if (p.block_size <= 0 || p.rope_rows <= 0) {
    return absl::InvalidArgumentError("Attention: block_size and rope_rows must be positive");
  }
  if (p.q == nullptr || p.out == nullptr || p.rows == nullptr || p.block_tables == nullptr ||
      p.k_cache == nullptr || p.v_cache == nullptr || p.rope_table == nullptr) {
    return absl::InvalidArgumentError("Attention: null pointer");
  }
  if (p.cache_type == core::DType::kI8 &&
      (p.k_scale == nullptr || p.v_scale == nullptr || p.v_group_size <= 0)) {
    return absl::InvalidArgumentError("Attention: int8 cache needs k_scale, v_scale, v_group_size");
  }
  if (p.own != nullptr &&
      (p.cache_type != core::DType::kI8 || p.k_pages == nullptr || p.v_pages == nullptr)) {
    return absl::InvalidArgumentError("Attention: own blocks need an int8 cache and F32 pages");
  }
  int32_t splits = AttentionNumSplits(p.num_rows, p.num_kv_heads);
  if (splits > 1) {
    const size_t per_split = SplitBytes(p.num_rows, p.num_heads, p.head_dim, 1);
    const size_t fit = workspace == nullptr ? 0 : workspace_bytes / per_split;
    if (fit < static_cast<size_t>(splits)) splits = fit >= 2 ? static_cast<int32_t>(fit) : 1;
  }
  const int group = p.num_heads / p.num_kv_heads;
  const size_t smem = static_cast<size_t>(group) * p.head_dim * sizeof(float);
  float* ws_ml = static_cast<float*>(workspace);
  float* ws_acc = ws_ml == nullptr ? nullptr
                                   : ws_ml + static_cast<size_t>(p.num_rows) * p.num_heads * splits * 2;
  const dim3 grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(splits));
  AttentionPartialKernel<<<grid, kThreads, smem, stream>>>(p, splits, ws_ml, ws_acc);
  if (absl::Status s = LaunchStatus("AttentionPartialKernel"); !s.ok() || splits == 1) return s;
  AttentionCombineKernel<<<dim3(static_cast<unsigned>(p.num_rows),
                                static_cast<unsigned>(p.num_heads)),
                           kThreads, 0, stream>>>(splits, p.head_dim, ws_ml, ws_acc, p.out);
  return LaunchStatus("AttentionCombineKernel");
}

}  // namespace kvfold::kernels::cuda
