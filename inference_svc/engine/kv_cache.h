// Paged KV cache: a BlockPool of fixed-size blocks shared by all sequences of an Engine,
// and a KvCache per sequence = PREFIX segment + MAIN segment, each a list of blocks.
//
// Layout of the pool (one backend Buffer): for each layer, k_cache and v_cache tensors
// [num_blocks, block_size, num_kv_heads * head_dim] F32, keys UN-ROTATED (CONTRACTS.md).
// No per-session max-length allocation: a sequence takes blocks as it grows and returns
// them when entries are dropped from the front of main (sliding windows) or cleared.
//
// Position rule (KvPolicy), applied inside attention at every step:
//   prefix entry j      -> prefix_pos_base + j * prefix_pos_stride
//   main entry j (row r)-> main_pos_base + (j - lo_r), lo_r = first main entry row r sees
// so windows never move positions out of the trained range.
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_KV_CACHE_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
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
};

class BlockPool {
 public:
  // ResourceExhausted when the backend cannot allocate the pool.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(kernels::Backend* backend,
                                                           int num_layers, int kv_dim,
                                                           int block_size, int num_blocks);
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  size_t bytes_per_block() const;  // all layers, K and V
  kernels::Tensor k_cache(int layer) const;
  kernels::Tensor v_cache(int layer) const;

  // ResourceExhausted when the pool is empty.
  absl::StatusOr<int32_t> AllocateBlock();
  void FreeBlock(int32_t block);

 private:
  BlockPool() = default;
  std::unique_ptr<kernels::Buffer> buffer_;
  int num_layers_ = 0, kv_dim_ = 0, block_size_ = 0, num_blocks_ = 0;
  std::vector<int32_t> free_;  // stack of free block ids
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
  size_t ResidentBytes() const;  // blocks held x bytes per block

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
