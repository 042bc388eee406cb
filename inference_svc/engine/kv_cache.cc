#include "inference_svc/engine/kv_cache.h"

#include <algorithm>

#include "kernels/check.h"
#include "absl/strings/str_cat.h"

namespace kvfold::engine {

using kernels::DType;
using kernels::Tensor;

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(kernels::Backend* backend,
                                                             int num_layers, int kv_dim,
                                                             int block_size, int num_blocks) {
  if (num_layers <= 0 || kv_dim <= 0 || block_size <= 0 || num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("BlockPool: bad geometry (layers ", num_layers,
                                                   ", kv_dim ", kv_dim, ", block_size ",
                                                   block_size, ", blocks ", num_blocks, ")"));
  }
  std::unique_ptr<BlockPool> pool(new BlockPool());
  pool->num_layers_ = num_layers;
  pool->kv_dim_ = kv_dim;
  pool->block_size_ = block_size;
  pool->num_blocks_ = num_blocks;
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> buffer =
      backend->Allocate(pool->bytes_per_block() * static_cast<size_t>(num_blocks));
  if (!buffer.ok()) return buffer.status();
  pool->buffer_ = std::move(*buffer);
  pool->free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) pool->free_.push_back(b);
  return pool;
}

size_t BlockPool::bytes_per_block() const {
  return static_cast<size_t>(num_layers_) * 2 * block_size_ * kv_dim_ * sizeof(float);
}

Tensor BlockPool::k_cache(int layer) const {
  const size_t per_tensor = static_cast<size_t>(num_blocks_) * block_size_ * kv_dim_ * sizeof(float);
  return kernels::ViewOf(*buffer_, (2 * static_cast<size_t>(layer)) * per_tensor, DType::kF32,
                         {num_blocks_, block_size_, kv_dim_});
}

Tensor BlockPool::v_cache(int layer) const {
  const size_t per_tensor = static_cast<size_t>(num_blocks_) * block_size_ * kv_dim_ * sizeof(float);
  return kernels::ViewOf(*buffer_, (2 * static_cast<size_t>(layer) + 1) * per_tensor, DType::kF32,
                         {num_blocks_, block_size_, kv_dim_});
}

absl::StatusOr<int32_t> BlockPool::AllocateBlock() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool exhausted (", num_blocks_, " blocks of ", block_size_, " tokens)"));
  }
  const int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void BlockPool::FreeBlock(int32_t block) {
  KVFOLD_CHECK(block >= 0 && block < num_blocks_);
  free_.push_back(block);
}

KvCache::KvCache(BlockPool* pool, const KvPolicy& policy) : pool_(pool), policy_(policy) {}

KvCache::~KvCache() { Clear(); }

size_t KvCache::ResidentBytes() const {
  return (prefix_blocks_.size() + main_blocks_.size()) * pool_->bytes_per_block();
}

void KvCache::Clear() {
  ClearPrefix();
  ClearMain();
}

void KvCache::ClearPrefix() {
  for (int32_t b : prefix_blocks_) pool_->FreeBlock(b);
  prefix_blocks_.clear();
  prefix_len_ = 0;
}

void KvCache::ClearMain() {
  for (int32_t b : main_blocks_) pool_->FreeBlock(b);
  main_blocks_.clear();
  main_len_ = 0;
  main_front_ = 0;
}

void KvCache::DropFront(int n) {
  KVFOLD_CHECK(n >= 0 && n <= main_len_);
  if (n == main_len_) {
    ClearMain();
    return;
  }
  main_len_ -= n;
  main_front_ += n;
  const int bs = pool_->block_size();
  const int whole = main_front_ / bs;
  if (whole > 0) {
    for (int i = 0; i < whole; ++i) pool_->FreeBlock(main_blocks_[i]);
    main_blocks_.erase(main_blocks_.begin(), main_blocks_.begin() + whole);  // no realloc
    main_front_ -= whole * bs;
  }
}

void KvCache::Truncate(int prefix_len, int main_len) {
  const int bs = pool_->block_size();
  if (prefix_len < prefix_len_) {
    prefix_len_ = std::max(0, prefix_len);
    const size_t keep = (prefix_len_ + bs - 1) / bs;
    while (prefix_blocks_.size() > keep) {
      pool_->FreeBlock(prefix_blocks_.back());
      prefix_blocks_.pop_back();
    }
  }
  if (main_len < main_len_) {
    main_len_ = std::max(0, main_len);
    if (main_len_ == 0) {
      ClearMain();
      return;
    }
    const size_t keep = (main_front_ + main_len_ + bs - 1) / bs;
    while (main_blocks_.size() > keep) {
      pool_->FreeBlock(main_blocks_.back());
      main_blocks_.pop_back();
    }
  }
}

absl::Status KvCache::Append(std::vector<int32_t>& blocks, int begin, int n, int32_t* slots) {
  const int bs = pool_->block_size();
  const int end = begin + n;
  const int need = (end + bs - 1) / bs - static_cast<int>(blocks.size());
  if (need > pool_->free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV pool exhausted: need ", need, " more blocks, ", pool_->free_blocks(), " free"));
  }
  for (int i = 0; i < need; ++i) blocks.push_back(*pool_->AllocateBlock());
  for (int s = begin; s < end; ++s) slots[s - begin] = blocks[s / bs] * bs + s % bs;
  return absl::OkStatus();
}

absl::Status KvCache::AppendPrefix(int n, int32_t* slots) {
  absl::Status s = Append(prefix_blocks_, prefix_len_, n, slots);
  if (s.ok()) prefix_len_ += n;
  return s;
}

absl::Status KvCache::AppendMain(int n, int32_t* slots) {
  absl::Status s = Append(main_blocks_, main_front_ + main_len_, n, slots);
  if (s.ok()) main_len_ += n;
  return s;
}

}  // namespace kvfold::engine
