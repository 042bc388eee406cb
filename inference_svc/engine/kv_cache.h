// Paged KV cache: a BlockPool of fixed-size blocks shared by all sequences of an Engine,
// and a KvCache per sequence = PREFIX segment + MAIN segment, each a list of blocks.
//
// Layout of the pool (one backend Buffer): for each layer, k_cache and v_cache tensors
// [num_blocks, num_kv_heads, block_size, head_dim] F32 (or F16 with core::DType::kF16:
// each value rounded to the nearest fp16 as it is stored): a block holds its entries head
// by head (kernels/attn_rows.h FloatKvIndex), keys UN-ROTATED (docs/contracts.md).
// With core::DType::kI8 (KIVI, docs/engine.md "INT8 KV") each layer instead holds int8 key
// and value codes [num_blocks, block_size, kv_dim] (kv_dim = num_kv_heads * head_dim; an
// entry's heads side by side), fp16 key scales [num_blocks, kv_dim] (a key group is
// one block) and fp16 value scales [num_blocks, block_size, ceil(kv_dim / value_group)], and a
// second, small store of F32 PAGES [num_pages, block_size, kv_dim] holds the entries of
// blocks that are still open (not yet quantized). A block gets a page when a sequence
// takes it and gives the page back once the Forward that completed (sealed) it ends.
// No per-session max-length allocation: a sequence takes blocks as it grows and returns
// them when entries are dropped from the front of main (sliding windows) or cleared.
//
// Position rule (KvPolicy), applied inside attention at every step:
//   prefix entry j      -> prefix_pos_base + j * prefix_pos_stride
//   main entry j (row r)-> main_pos_base + (j - lo_r), lo_r = first main entry row r sees
// so windows never move positions out of the trained range.
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_KV_CACHE_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_KV_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/kv_bytes.h"
#include "kernels/backend.h"

namespace kvfold::engine {

// How a sequence places its entries. Presets below for every mode.
struct KvPolicy {
  // sink mode: the first `auto_prefix_tokens` causal tokens go to the prefix segment.
  int auto_prefix_tokens = 0;
  int prefix_pos_base = 0;
  int prefix_pos_stride = 1;  // memory modes: 0 (all memory slots at position 0)
  int main_pos_base = 0;      // sink: S; memory modes: 1
  // > 0: each new row sees at most the last `window` main entries including itself, and
  // entries no future row can see are dropped (sliding, sink). 0: unbounded (full,
  // memory modes, which manage their window themselves).
  int window = 0;

  static KvPolicy Full() { return {}; }
  static KvPolicy Sliding(int window) { return {0, 0, 1, 0, window}; }
  static KvPolicy Sink(int sink_tokens, int window) {
    return {sink_tokens, 0, 1, sink_tokens, window};
  }
  static KvPolicy Memory() { return {0, 0, 0, 1, 0}; }
  bool operator==(const KvPolicy&) const = default;
};

// The KV cache dtypes this engine stores: core::DType::kF32, kF16 and kI8 (KIVI int8
// codes). THE parser of --kv-dtype (CLI and service): core::ParseDType, then
// InvalidArgument unless the dtype is one of those three.
absl::StatusOr<core::DType> ParseKvDType(std::string_view name);
// OK for kF32, kF16 and kI8; InvalidArgument naming the dtype otherwise.
absl::Status ValidateKvDType(core::DType dtype);
// ValidateKvDType, then Unimplemented when `backend` has no ops for that cache (kF16:
// SupportsF16Kv, kI8: SupportsInt8Kv). Engine::Create asks before loading weights;
// BlockPool::Create asks again for its own callers.
absl::Status CheckKvDType(const kernels::Backend& backend, core::DType dtype);

struct BlockPoolOptions {
  core::DType dtype = core::DType::kF32;  // kF32, kF16 or kI8. Default: F32.
  int value_group = 32;           // int8: channels per value scale. Default: 32.
  int num_pages = 0;              // int8: initial F32 pages (grown on demand). 0 = 16.
};

class BlockPool {
 public:
  // ResourceExhausted when the backend cannot allocate the pool; InvalidArgument for bad
  // geometry; CheckKvDType's status for the dtype.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(kernels::Backend* backend,
                                                           int num_layers, int num_kv_heads,
                                                           int head_dim, int block_size,
                                                           int num_blocks,
                                                           const BlockPoolOptions& options = {});
  ~BlockPool();
  core::DType dtype() const { return options_.dtype; }
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  size_t bytes_per_block() const;  // all layers, K and V (int8: codes + fp16 scales)
  // KV bytes one token costs (core::KvBytesPerToken of this pool's layout, rounded up).
  size_t bytes_per_token() const;
  size_t bytes_per_page() const;  // int8: one F32 page, all layers, K and V; F32, F16: 0
  // F32 or F16 pool only: [num_blocks, num_kv_heads, block_size, head_dim] of the pool's
  // dtype.
  kernels::Tensor k_cache(int layer) const;
  kernels::Tensor v_cache(int layer) const;
  // Int8 pool only.
  kernels::KvCacheI8 int8_cache(int layer) const;
  int num_pages() const { return num_pages_; }
  int free_pages() const { return static_cast<int>(free_pages_.size()); }
  // The F32 page of `block`, or -1 (sealed, or an F32 pool).
  int32_t page_of(int32_t block) const {
    return page_of_.empty() ? -1 : page_of_[static_cast<size_t>(block)];
  }
  // Int8: gives `block` a page (the page store doubles when all pages are taken; only
  // between Forwards). The first `restore` entries are rebuilt from the block's codes
  // (used when a sealed block becomes the open block again after a rollback).
  absl::Status AttachPage(int32_t block, int restore = 0);
  void ReleasePage(int32_t block);  // no-op without a page

  // ResourceExhausted when the pool is empty. Blocks go out lowest first while none was
  // freed; the first time a block past those handed out before is given, the pool's
  // memory for it and the blocks after it (about 2 MiB of each layer's K and V) is backed
  // at once (Backend::Populate), so a decode step writing its first entry in a new block
  // does not stop on page faults (on the CPU backend: one per 4 KiB page where
  // transparent huge pages are not available).
  absl::StatusOr<int32_t> AllocateBlock();
  void FreeBlock(int32_t block);  // also releases its page
  // Copies every layer's K and V entries of block `src` to block `dst` (int8: the codes
  // and scales, and the F32 page when `src` has one, which `dst` must then have too), the
  // same bits, on the pool's stream; waits for the copies.
  absl::Status CopyBlocks(std::span<const int32_t> src, std::span<const int32_t> dst);

  // Backs the memory of every block not backed yet, in the same chunks AllocateBlock
  // uses, until all are or `stop` turns true (checked between chunks); returns whether
  // the whole pool is backed. The one call that may run on another thread while the
  // pool's owner allocates: both only move the backed mark forwards, and backing memory
  // twice changes nothing. A server calls it at start-up (docs/service.md "KV pool
  // populated at start-up") so that no decode step waits for a page of a new block.
  bool PopulateAll(const std::atomic<bool>& stop);
  int populated_blocks() const { return populated_.load(std::memory_order_acquire); }

 private:
  BlockPool() = default;
  core::KvLayout layout() const;
  // Float pool: tensor `index` of the buffer (layer l's K is 2 l, its V 2 l + 1).
  kernels::Tensor FloatCache(int index) const;
  absl::Status GrowPages();
  // Backs the blocks from the backed mark through `block` and up to a chunk after it
  // (about 2 MiB of the largest per-block tensor), then moves the mark past them.
  void PopulateThrough(int32_t block);
  // Backs blocks [begin, end) of every block-indexed tensor.
  void PopulateRange(int begin, int end);
  // Blocks per Populate call: about 2 MiB of the largest per-block tensor (a huge page
  // where the backend has them), one call per tensor instead of a fault per page.
  int PopulateChunk() const;
  absl::Status RestorePage(int32_t block, int32_t page, int count);

  kernels::Backend* backend_ = nullptr;
  std::unique_ptr<kernels::Stream> stream_;
  BlockPoolOptions options_;
  std::unique_ptr<kernels::Buffer> buffer_;
  std::unique_ptr<kernels::Buffer> page_buffer_;  // int8 only
  int kv_dim() const { return num_kv_heads_ * head_dim_; }
  int num_layers_ = 0, num_kv_heads_ = 0, head_dim_ = 0, block_size_ = 0, num_blocks_ = 0,
      num_pages_ = 0;
  std::vector<int32_t> free_;        // stack of free block ids
  // Blocks [0, populated_) were given to Populate. Only ever grows (compare-and-swap to
  // the larger value): PopulateAll may move it from another thread.
  std::atomic<int> populated_{0};
  std::vector<int32_t> free_pages_;  // stack of free page ids
  std::vector<int32_t> page_of_;     // per block; int8 only
};

class KvCache {
 public:
  KvCache(BlockPool* pool, const KvPolicy& policy);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvPolicy& policy() const { return policy_; }
  int prefix_len() const { return prefix_len_; }
  int main_len() const { return main_len_; }
  int resident_tokens() const { return prefix_len_ + main_len_; }
  size_t ResidentBytes() const;  // blocks held x bytes per block (+ F32 pages held, int8)

  // Makes this empty cache hold `other`'s entries: as many blocks, each a copy of the
  // other's (BlockPool::CopyBlocks), the same lengths and layout. FailedPrecondition
  // unless this cache is empty and both share a pool and a policy; ResourceExhausted
  // (this cache still empty) when the pool has too few free blocks or pages.
  absl::Status CopyFrom(const KvCache& other);
  // Only `other`'s first `main_len` main entries (0 < main_len <= other.main_len()), and
  // its prefix segment whole: the blocks that hold them. FailedPrecondition unless
  // `other`'s main entries start at its first block's first slot (nothing dropped from
  // the front within it), or for an INT8 pool unless main_len is all of them or ends a
  // block (a sealed block's codes depend on the entries after the cut).
  absl::Status CopyFrom(const KvCache& other, int main_len);

  void Clear();
  void ClearPrefix();
  void ClearMain();
  // Drops the oldest n main entries (n <= main_len), freeing blocks that become empty.
  void DropFront(int n);
  // Shrinks both segments to at most the given lengths (newest entries go), freeing
  // blocks. Used to roll back a failed Forward.
  void Truncate(int prefix_len, int main_len);

  // --- Used by Engine::Forward -------------------------------------------------------
  // Appends n entries to a segment; writes their physical slots into `slots`.
  // ResourceExhausted (cache unchanged) when the pool runs out.
  absl::Status AppendPrefix(int n, int32_t* slots);
  absl::Status AppendMain(int n, int32_t* slots);
  const std::vector<int32_t>& prefix_blocks() const { return prefix_blocks_; }
  const std::vector<int32_t>& main_blocks() const { return main_blocks_; }
  int main_front() const { return main_front_; }  // physical slot of main entry 0

 private:
  absl::Status Append(std::vector<int32_t>& blocks, int begin, int n, int32_t* slots);

  BlockPool* pool_;
  KvPolicy policy_;
  std::vector<int32_t> prefix_blocks_;
  std::vector<int32_t> main_blocks_;
  int prefix_len_ = 0;
  int main_len_ = 0;
  int main_front_ = 0;
};

}  // namespace kvfold::engine

#endif  // KVFOLD_INFERENCE_SVC_ENGINE_KV_CACHE_H_
