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

constexpr int kChunk = 8;  // channels one thread stages per load (16 bytes of bf16/f16)

// Eight F32 values from a 16-byte aligned address, as two vector loads.
__device__ __forceinline__ void Load8F32(const float* src, float out[kChunk]) {
  const float4 a = reinterpret_cast<const float4*>(src)[0];
  const float4 b = reinterpret_cast<const float4*>(src)[1];
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// Eight 16-bit floats (fp16 or bf16) packed in a uint4, taken apart by shifts (no type
// punning), as F32.
__device__ __forceinline__ void Unpack8(const uint4 u, bool f16, float out[kChunk]) {
  const unsigned words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int e = 0; e < kChunk / 2; ++e) {
    const auto lo = static_cast<unsigned short>(words[e] & 0xffffu);
    const auto hi = static_cast<unsigned short>(words[e] >> 16);
    out[2 * e] =
        f16 ? __half2float(__ushort_as_half(lo)) : __bfloat162float(__ushort_as_bfloat16(lo));
    out[2 * e + 1] =
        f16 ? __half2float(__ushort_as_half(hi)) : __bfloat162float(__ushort_as_bfloat16(hi));
  }
}

// Channels [c, c + n) (n <= kChunk) of one key's head, as F32: from the row's own F32 page
// (from_page), else from the cache, dequantized when int8. `off` is the element index of the
// head's channel 0 (all layouts keep a head's channels contiguous); head_ch = kv_head *
// head_dim + c, the channel in the whole KV row (int8 scales are indexed by it). vec: the
// chunk is 16-byte aligned in every layout (checked where Attention launches), so a whole
// one is one vector load.
__device__ __forceinline__ void LoadChunk(const AttentionParams& p, bool is_key, int64_t off,
                                          bool from_page, int64_t slot, int32_t block, int head_ch,
                                          int c, int n, bool vec, float out[kChunk]) {
  const int64_t i0 = off + c;
  const void* base =
      from_page ? (is_key ? p.k_pages : p.v_pages) : (is_key ? p.k_cache : p.v_cache);
  const core::DType type = from_page ? core::DType::kF32 : p.cache_type;
  const bool whole = vec && n == kChunk;
  if (whole) {
    switch (type) {
      case core::DType::kF32:
        Load8F32(static_cast<const float*>(base) + i0, out);
        break;
      case core::DType::kF16:
      case core::DType::kBF16:
        Unpack8(*reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i0),
                type == core::DType::kF16, out);
        break;
      default: {
        const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const int8_t*>(base) + i0);
        const int8_t* b = reinterpret_cast<const int8_t*>(&u);
#pragma unroll
        for (int e = 0; e < kChunk; ++e) out[e] = static_cast<float>(b[e]);
        break;
      }
    }
  } else {
    for (int e = 0; e < n; ++e) out[e] = LoadElem(base, i0 + e, type);
  }
  if (type != core::DType::kI8) return;
  const core::DType scale_type = p.fp16_scales ? core::DType::kF16 : core::DType::kF32;
  const int kv_dim = p.num_kv_heads * p.head_dim;
  const int groups = (kv_dim + p.v_group_size - 1) / p.v_group_size;
  if (whole && is_key) {
    // The chunk's 8 per-channel key scales are contiguous and 16-byte aligned.
    const int64_t i = static_cast<int64_t>(block) * kv_dim + head_ch;
    float sc[kChunk];
    if (p.fp16_scales) {
      Unpack8(*reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.k_scale) + i), true,
              sc);
    } else {
      Load8F32(static_cast<const float*>(p.k_scale) + i, sc);
    }
#pragma unroll
    for (int e = 0; e < kChunk; ++e) out[e] *= sc[e];
  } else if (whole && p.v_group_size % kChunk == 0) {
    // The chunk starts at a multiple of kChunk, so it lies in one value group: one scale.
    const float sc = LoadElem(p.v_scale, slot * groups + head_ch / p.v_group_size, scale_type);
#pragma unroll
    for (int e = 0; e < kChunk; ++e) out[e] *= sc;
  } else {
    for (int e = 0; e < n; ++e) {
      const int ch = head_ch + e;
      out[e] *= is_key ? LoadElem(p.k_scale, static_cast<int64_t>(block) * kv_dim + ch, scale_type)
                       : LoadElem(p.v_scale, slot * groups + ch / p.v_group_size, scale_type);
    }
  }
}

// grid (num_rows, num_kv_heads, num_splits), block kThreads, dynamic shared memory (sized
// where Attention launches): the group's queries [group, head_dim], then the tile's rotated keys
// and its values, each [kTile, head_dim + 1] F32 (the odd row stride keeps the per-key
// score threads on distinct banks).
// Per tile: (1) resolve its keys to slots, (2) stage keys (rotated once, by position) and
// values with wide loads by all threads, (3) scores: one thread per (key, query head),
// (4) online softmax: one warp per head, (5) weighted values: threads over head dims.
// num_splits == 1: writes normalised rows to p.out. Otherwise per split:
//   ws_ml  [num_rows, num_heads, num_splits, 2]          (running max, sum of exp)
//   ws_acc [num_rows, num_heads, num_splits, head_dim]   (unnormalised weighted values)
// kMaxGroup (4, 8 or 16, >= the group) sizes the per-head arrays: the accumulators live in
// registers, so a bound near the real group keeps the kernel at ~half the registers of the
// largest and lets more blocks share an SM.
template <int kMaxGroup>
__global__ void __launch_bounds__(kThreads)
    AttentionPartialKernel(const AttentionParams p, int num_splits, bool vec, float* ws_ml,
                           float* ws_acc) {
  extern __shared__ float smem[];
  __shared__ float prob_s[kMaxGroup][kTile];
  __shared__ float max_s[kMaxGroup], sum_s[kMaxGroup], corr_s[kMaxGroup];
  __shared__ int64_t slot_s[kTile];  // physical slot (own page's when page_s)
  __shared__ int64_t off_s[kTile];   // element index of the head's channel 0
  __shared__ int32_t block_s[kTile];
  __shared__ int32_t pos_s[kTile];
  __shared__ bool page_s[kTile];  // the key is in the row's own block: read from its page

  const int row = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = p.num_heads / p.num_kv_heads;
  const int head_dim = p.head_dim, half = head_dim / 2;
  const int kv_dim = p.num_kv_heads * head_dim;
  const int bs = p.block_size;
  const int stride = head_dim + 1;
  float* q_s = smem;
  float* k_s = q_s + group * head_dim;
  float* v_s = k_s + kTile * stride;

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
  float acc[kDimsPerThread][kMaxGroup];
#pragma unroll
  for (int di = 0; di < kDimsPerThread; ++di) {
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) acc[di][g] = 0.0f;
  }
  const int half_chunks = (half + kChunk - 1) / kChunk;
  const int chunks = (head_dim + kChunk - 1) / kChunk;
  __syncthreads();

  for (int t0 = begin; t0 < end; t0 += kTile) {
    const int n_keys = min(kTile, end - t0);
    // 1. Resolve the tile's keys to physical slots and positions.
    if (tid < n_keys) {
      const int k = t0 + tid;
      int phys, table, pos;
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
      const int32_t block = p.block_tables[static_cast<int64_t>(table) + phys / bs];
      const bool from_page = block == own_block && own_block >= 0;
      const int64_t slot = static_cast<int64_t>(from_page ? own_page : block) * bs + phys % bs;
      slot_s[tid] = slot;
      off_s[tid] = from_page || p.cache_type == core::DType::kI8
                       ? slot * kv_dim + static_cast<int64_t>(kv_head) * head_dim
                       : kernels::FloatKvIndex(slot, kv_head, 0, p.num_kv_heads, bs, head_dim);
      block_s[tid] = block;
      pos_s[tid] = min(max(pos, 0), p.rope_rows - 1);
      page_s[tid] = from_page;
    }
    __syncthreads();

    // 2. Stage the tile as F32: key channel pairs (i, i + half) rotated by the key's
    //    position, values as stored. Every load of the tile is issued at once.
    for (int w = tid; w < n_keys * half_chunks; w += kThreads) {
      const int j = w / half_chunks, c = (w % half_chunks) * kChunk;
      const int n = min(kChunk, half - c);
      float k0[kChunk], k1[kChunk];
      LoadChunk(p, true, off_s[j], page_s[j], slot_s[j], block_s[j], kv_head * head_dim + c, c, n,
                vec, k0);
      LoadChunk(p, true, off_s[j], page_s[j], slot_s[j], block_s[j], kv_head * head_dim + half + c,
                half + c, n, vec, k1);
      const float* cs = p.rope_table + static_cast<int64_t>(pos_s[j]) * head_dim;
      float* kr = k_s + j * stride;
      for (int e = 0; e < n; ++e) {
        const float co = cs[c + e], si = cs[half + c + e];
        kr[c + e] = k0[e] * co - k1[e] * si;
        kr[half + c + e] = k1[e] * co + k0[e] * si;
      }
    }
    for (int w = tid; w < n_keys * chunks; w += kThreads) {
      const int j = w / chunks, c = (w % chunks) * kChunk;
      const int n = min(kChunk, head_dim - c);
      float v[kChunk];
      LoadChunk(p, false, off_s[j], page_s[j], slot_s[j], block_s[j], kv_head * head_dim + c, c, n,
                vec, v);
      float* vr = v_s + j * stride;
      for (int e = 0; e < n; ++e) vr[c + e] = v[e];
    }
    __syncthreads();

    // 3. Scores: one thread per (key, query head); a warp shares the head (its query is a
    //    broadcast) and spans the tile's keys.
    for (int w = tid; w < kTile * group; w += kThreads) {
      const int j = w % kTile, g = w / kTile;
      float dot = 0.0f;
      if (j < n_keys) {
        const float* qg = q_s + g * head_dim;
        const float* kr = k_s + j * stride;
        for (int i = 0; i < head_dim; ++i) dot = fmaf(qg[i], kr[i], dot);
      }
      prob_s[g][j] = j < n_keys ? dot * p.scale : -INFINITY;
    }
    __syncthreads();

    // 4. Online softmax: one warp per query head, lanes over the tile's keys.
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

    // 5. Weighted values: each thread owns head dims tid, tid + kThreads for every head.
#pragma unroll
    for (int di = 0; di < kDimsPerThread; ++di) {
      const int d = tid + di * kThreads;
      if (d < head_dim) {
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g < group) acc[di][g] *= corr_s[g];
        }
        for (int j = 0; j < n_keys; ++j) {
          const float v = v_s[j * stride + d];
#pragma unroll
          for (int g = 0; g < kMaxGroup; ++g) {
            if (g < group) acc[di][g] += prob_s[g][j] * v;
          }
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
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
  const size_t smem =
      static_cast<size_t>(group * p.head_dim + 2 * kTile * (p.head_dim + 1)) * sizeof(float);
  using Kernel = void (*)(const AttentionParams, int, bool, float*, float*);
  const Kernel kernel = group <= 4   ? AttentionPartialKernel<4>
                        : group <= 8 ? AttentionPartialKernel<8>
                                     : AttentionPartialKernel<kAttnMaxGroup>;
  // Above the default 48 KiB per block (large head_dim and group) the kernel opts in.
  if (smem > 48 * 1024) {
    if (absl::Status s =
            CudaStatus(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)),
                       "Attention: shared memory");
        !s.ok()) {
      return s;
    }
  }
  // Whole 16-byte chunks everywhere: a head's channels start at a multiple of head_dim in
  // every layout (and a block's key scales at a multiple of kv_dim), so head_dim % 16 (both
  // halves whole chunks) and aligned bases suffice.
  const bool vec = p.head_dim % (2 * kChunk) == 0 && Aligned16(p.k_cache) && Aligned16(p.v_cache) &&
                   Aligned16(p.k_pages) && Aligned16(p.v_pages) && Aligned16(p.k_scale);
  float* ws_ml = static_cast<float*>(workspace);
  float* ws_acc = ws_ml == nullptr ? nullptr
                                   : ws_ml + static_cast<size_t>(p.num_rows) * p.num_heads * splits * 2;
  const dim3 grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(splits));
  kernel<<<grid, kThreads, smem, stream>>>(p, splits, vec, ws_ml, ws_acc);
  if (absl::Status s = LaunchStatus("AttentionPartialKernel"); !s.ok() || splits == 1) return s;
  AttentionCombineKernel<<<dim3(static_cast<unsigned>(p.num_rows),
                                static_cast<unsigned>(p.num_heads)),
                           kThreads, 0, stream>>>(splits, p.head_dim, ws_ml, ws_acc, p.out);
  return LaunchStatus("AttentionCombineKernel");
}

}  // namespace kvfold::kernels::cuda
