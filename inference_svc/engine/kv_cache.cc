#include "inference_svc/engine/kv_cache.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/fp16.h"
#include "core/kv_bytes.h"
#include "core/status_macros.h"
#include "kernels/check.h"
#include "kernels/quant/kv_quant.h"

namespace kvfold::engine {

using core::DType;
using kernels::Tensor;

namespace {

size_t AlignUp(size_t x) { return (x + 63) / 64 * 64; }

int64_t ValueGroups(int kv_dim, int value_group) {
  return (kv_dim + value_group - 1) / value_group;
}

// Byte sizes of one layer's int8 tensors for `num_blocks` blocks: k codes, v codes,
// k scales, v scales (fp16; each tensor starts 64-byte aligned).
struct Int8Layout {
  size_t codes, k_scales, v_scales;
  size_t layer_bytes() const { return 2 * AlignUp(codes) + AlignUp(k_scales) + AlignUp(v_scales); }
};

Int8Layout LayoutOf(int num_blocks, int block_size, int kv_dim, int value_group) {
  const size_t nb = static_cast<size_t>(num_blocks);
  return {nb * block_size * kv_dim, nb * kv_dim * sizeof(uint16_t),
          nb * block_size * ValueGroups(kv_dim, value_group) * sizeof(uint16_t)};
}

}  // namespace

absl::StatusOr<core::DType> ParseKvDType(std::string_view name) {
  absl::StatusOr<core::DType> dtype = core::ParseDType(name);
  if (!dtype.ok()) return dtype.status();
  if (absl::Status s = ValidateKvDType(*dtype); !s.ok()) return s;
  return *dtype;
}

absl::Status ValidateKvDType(core::DType dtype) {
  if (dtype == core::DType::kF32 || dtype == core::DType::kF16 || dtype == core::DType::kI8) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("KV dtype ", core::DTypeName(dtype),
                                                 " is not supported (expected f32, f16 or int8)"));
}

absl::Status CheckKvDType(const kernels::Backend& backend, core::DType dtype) {
  if (absl::Status s = ValidateKvDType(dtype); !s.ok()) return s;
  const bool supported = dtype == core::DType::kF16  ? backend.SupportsF16Kv()
                         : dtype == core::DType::kI8 ? backend.SupportsInt8Kv()
                                                     : true;
  if (supported) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat("backend ", backend.Name(), " has no ",
                                               dtype == core::DType::kF16 ? "F16" : "INT8",
                                               " KV cache (use --kv-dtype f32)"));
}

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(kernels::Backend* backend,
                                                             int num_layers, int num_kv_heads,
                                                             int head_dim, int block_size,
                                                             int num_blocks,
                                                             const BlockPoolOptions& options) {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 ||
      int64_t{num_kv_heads} * head_dim > std::numeric_limits<int>::max() || block_size <= 0 ||
      num_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BlockPool: bad geometry (layers ", num_layers, ", kv heads ", num_kv_heads, ", head_dim ",
        head_dim, ", block_size ", block_size, ", blocks ", num_blocks, ")"));
  }
  const int kv_dim = num_kv_heads * head_dim;
  if (absl::Status s = CheckKvDType(*backend, options.dtype); !s.ok()) return s;
  const bool int8 = options.dtype == core::DType::kI8;
  if (int8 && options.value_group < 1) {
    return absl::InvalidArgumentError("BlockPool: int8 value_group must be >= 1");
  }
  std::unique_ptr<BlockPool> pool(new BlockPool());
  pool->backend_ = backend;
  pool->options_ = options;
  pool->num_layers_ = num_layers;
  pool->num_kv_heads_ = num_kv_heads;
  pool->head_dim_ = head_dim;
  pool->block_size_ = block_size;
  pool->num_blocks_ = num_blocks;
  const size_t bytes =
      int8
          ? num_layers * LayoutOf(num_blocks, block_size, kv_dim, options.value_group).layer_bytes()
          : pool->bytes_per_block() * static_cast<size_t>(num_blocks);
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> buffer = backend->Allocate(bytes);
  if (!buffer.ok()) return buffer.status();
  pool->buffer_ = std::move(*buffer);
  pool->free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) pool->free_.push_back(b);
  pool->stream_ = backend->CreateStream();
  if (int8) {
    pool->page_of_.assign(num_blocks, -1);
    pool->options_.num_pages = options.num_pages > 0 ? options.num_pages : 16;
    if (absl::Status s = pool->GrowPages(); !s.ok()) return s;
  }
  return pool;
}

BlockPool::~BlockPool() = default;

core::KvLayout BlockPool::layout() const {
  return {.num_layers = static_cast<uint64_t>(num_layers_),
          .kv_dim = static_cast<uint64_t>(kv_dim()),
          .dtype = options_.dtype,
          .block_size = static_cast<uint64_t>(block_size_),
          .value_group = static_cast<uint64_t>(options_.value_group)};
}

// The layout was checked by Create, so the accounting cannot fail.
size_t BlockPool::bytes_per_block() const { return core::KvBytesPerBlock(layout()).value(); }
size_t BlockPool::bytes_per_token() const { return core::KvBytesPerToken(layout()).value(); }

size_t BlockPool::bytes_per_page() const {
  if (options_.dtype != core::DType::kI8) return 0;
  return static_cast<size_t>(num_layers_) * 2 * block_size_ * kv_dim() * sizeof(float);
}

Tensor BlockPool::k_cache(int layer) const { return FloatCache(2 * layer); }

Tensor BlockPool::v_cache(int layer) const { return FloatCache(2 * layer + 1); }

Tensor BlockPool::FloatCache(int index) const {
  KVFOLD_CHECK(options_.dtype == core::DType::kF32 || options_.dtype == core::DType::kF16);
  const size_t per_tensor =
      static_cast<size_t>(num_blocks_) * block_size_ * kv_dim() * core::DTypeSize(options_.dtype);
  return kernels::ViewOf(*buffer_, static_cast<size_t>(index) * per_tensor, options_.dtype,
                         {num_blocks_, num_kv_heads_, block_size_, head_dim_});
}

kernels::KvCacheI8 BlockPool::int8_cache(int layer) const {
  KVFOLD_CHECK(options_.dtype == core::DType::kI8);
  const Int8Layout lay = LayoutOf(num_blocks_, block_size_, kv_dim(), options_.value_group);
  size_t off = static_cast<size_t>(layer) * lay.layer_bytes();
  kernels::KvCacheI8 c;
  c.value_group = options_.value_group;
  c.k_codes = kernels::ViewOf(*buffer_, off, DType::kI8, {num_blocks_, block_size_, kv_dim()});
  off += AlignUp(lay.codes);
  c.v_codes = kernels::ViewOf(*buffer_, off, DType::kI8, {num_blocks_, block_size_, kv_dim()});
  off += AlignUp(lay.codes);
  c.k_scales = kernels::ViewOf(*buffer_, off, DType::kF16, {num_blocks_, kv_dim()});
  off += AlignUp(lay.k_scales);
  c.v_scales =
      kernels::ViewOf(*buffer_, off, DType::kF16,
                      {num_blocks_, block_size_, ValueGroups(kv_dim(), options_.value_group)});
  const size_t page_tensor =
      static_cast<size_t>(num_pages_) * block_size_ * kv_dim() * sizeof(float);
  c.k_pages = kernels::ViewOf(*page_buffer_, 2 * static_cast<size_t>(layer) * page_tensor,
                              DType::kF32, {num_pages_, block_size_, kv_dim()});
  c.v_pages = kernels::ViewOf(*page_buffer_, (2 * static_cast<size_t>(layer) + 1) * page_tensor,
                              DType::kF32, {num_pages_, block_size_, kv_dim()});
  return c;
}

absl::Status BlockPool::GrowPages() {
  const int old_pages = num_pages_;
  const int new_pages = old_pages == 0 ? options_.num_pages : 2 * old_pages;
  const size_t page_tensor_bytes = static_cast<size_t>(block_size_) * kv_dim() * sizeof(float);
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> buffer =
      backend_->Allocate(static_cast<size_t>(num_layers_) * 2 * new_pages * page_tensor_bytes);
  if (!buffer.ok()) return buffer.status();
  if (old_pages > 0) {
    // Layout [layer][k|v][page]: copy each old tensor to the start of its new tensor.
    for (int t = 0; t < 2 * num_layers_; ++t) {
      const Tensor src = kernels::ViewOf(*page_buffer_, t * old_pages * page_tensor_bytes,
                                         DType::kF32, {old_pages, block_size_, kv_dim()});
      const Tensor dst = kernels::ViewOf(**buffer, t * new_pages * page_tensor_bytes, DType::kF32,
                                         {old_pages, block_size_, kv_dim()});
      if (absl::Status s = backend_->Copy(*stream_, src, dst); !s.ok()) return s;
    }
    if (absl::Status s = backend_->Synchronize(*stream_); !s.ok()) return s;
  }
  page_buffer_ = std::move(*buffer);
  num_pages_ = new_pages;
  for (int p = new_pages - 1; p >= old_pages; --p) free_pages_.push_back(p);
  return absl::OkStatus();
}

absl::Status BlockPool::AttachPage(int32_t block, int restore) {
  KVFOLD_CHECK(options_.dtype == core::DType::kI8 && page_of_[block] < 0);
  if (free_pages_.empty()) {
    if (absl::Status s = GrowPages(); !s.ok()) return s;
  }
  const int32_t page = free_pages_.back();
  if (restore > 0) {
    if (absl::Status s = RestorePage(block, page, restore); !s.ok()) return s;
  }
  free_pages_.pop_back();
  page_of_[block] = page;
  return absl::OkStatus();
}

absl::Status BlockPool::RestorePage(int32_t block, int32_t page, int count) {
  const int bs = block_size_, kv = kv_dim(), g = options_.value_group;
  const int64_t vg = ValueGroups(kv, g);
  std::vector<int8_t> codes(static_cast<size_t>(count) * kv);
  std::vector<uint16_t> half_scales(static_cast<size_t>(count) * std::max<int64_t>(kv, vg));
  std::vector<float> scales(half_scales.size());
  std::vector<float> values(static_cast<size_t>(count) * kv);
  for (int l = 0; l < num_layers_; ++l) {
    const kernels::KvCacheI8 c = int8_cache(l);
    for (int part = 0; part < 2; ++part) {  // keys, then values
      const Tensor code_t =
          (part == 0 ? c.k_codes : c.v_codes).Rows(block, 1).Reshape({bs, kv}).Rows(0, count);
      const Tensor scale_t = part == 0 ? c.k_scales.Rows(block, 1)
                                       : c.v_scales.Rows(block, 1).Reshape({bs, vg}).Rows(0, count);
      if (absl::Status s = backend_->CopyToHost(*stream_, code_t, codes.data()); !s.ok()) return s;
      if (absl::Status s = backend_->CopyToHost(*stream_, scale_t, half_scales.data()); !s.ok()) {
        return s;
      }
      if (absl::Status s = backend_->Synchronize(*stream_); !s.ok()) return s;
      for (size_t i = 0; i < scales.size(); ++i) scales[i] = Fp16ToFp32(half_scales[i]);
      absl::Status s =
          part == 0
              ? quant::DequantizeKeys(codes.data(), scales.data(), count, kv, bs, values.data())
              : quant::DequantizeValues(codes.data(), scales.data(), count, kv, g, values.data());
      if (!s.ok()) return s;
      const Tensor dst =
          (part == 0 ? c.k_pages : c.v_pages).Rows(page, 1).Reshape({bs, kv}).Rows(0, count);
      if (s = backend_->CopyToDevice(*stream_, values.data(), dst); !s.ok()) return s;
      if (s = backend_->Synchronize(*stream_); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

void BlockPool::ReleasePage(int32_t block) {
  if (page_of_.empty() || page_of_[block] < 0) return;
  free_pages_.push_back(page_of_[block]);
  page_of_[block] = -1;
}

absl::StatusOr<int32_t> BlockPool::AllocateBlock() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool exhausted (", num_blocks_, " blocks of ", block_size_, " tokens)"));
  }
  const int32_t b = free_.back();
  free_.pop_back();
  if (b >= populated_.load(std::memory_order_acquire)) PopulateThrough(b);
  return b;
}

namespace {
// mark = max(mark, end).
void RaiseMark(std::atomic<int>& mark, int end) {
  int seen = mark.load(std::memory_order_acquire);
  while (seen < end && !mark.compare_exchange_weak(seen, end, std::memory_order_acq_rel)) {
  }
}
}  // namespace

void BlockPool::PopulateRange(int begin, int end) {
  auto populate = [&](const kernels::Tensor& t) {  // t: [num_blocks, ...]
    const size_t per_block = t.size_bytes() / static_cast<size_t>(num_blocks_);
    backend_->Populate(kernels::MakeTensor(static_cast<char*>(t.data) + begin * per_block,
                                           DType::kI8,
                                           {static_cast<int64_t>((end - begin) * per_block)}));
  };
  for (int layer = 0; layer < num_layers_; ++layer) {
    if (options_.dtype == core::DType::kI8) {
      const kernels::KvCacheI8 c = int8_cache(layer);
      for (const kernels::Tensor* t : {&c.k_codes, &c.v_codes, &c.k_scales, &c.v_scales}) {
        populate(*t);
      }
    } else {
      populate(k_cache(layer));
      populate(v_cache(layer));
    }
  }
}

int BlockPool::PopulateChunk() const {
  constexpr size_t kChunkBytes = size_t{2} << 20;
  const size_t entry = options_.dtype == core::DType::kI8 ? 1 : core::DTypeSize(options_.dtype);
  const size_t block_bytes = static_cast<size_t>(block_size_) * kv_dim() * entry;
  return static_cast<int>(std::max<size_t>(1, kChunkBytes / block_bytes));
}

void BlockPool::PopulateThrough(int32_t block) {
  const int begin = populated_.load(std::memory_order_acquire);
  if (block < begin) return;
  const int end = std::min(num_blocks_, std::max(block + 1, begin + PopulateChunk()));
  PopulateRange(begin, end);
  RaiseMark(populated_, end);
}

bool BlockPool::PopulateAll(const std::atomic<bool>& stop) {
  const int chunk = PopulateChunk();
  for (;;) {
    const int begin = populated_.load(std::memory_order_acquire);
    if (begin >= num_blocks_) return true;
    if (stop.load(std::memory_order_relaxed)) return false;
    const int end = std::min(num_blocks_, begin + chunk);
    PopulateRange(begin, end);
    RaiseMark(populated_, end);
  }
}

void BlockPool::FreeBlock(int32_t block) {
  KVFOLD_CHECK(block >= 0 && block < num_blocks_);
  ReleasePage(block);
  free_.push_back(block);
}

absl::Status BlockPool::CopyBlocks(std::span<const int32_t> src, std::span<const int32_t> dst) {
  KVFOLD_CHECK(src.size() == dst.size());
  auto copy = [&](const Tensor& t, int32_t from, int32_t to) {
    return backend_->Copy(*stream_, t.Rows(from, 1), t.Rows(to, 1));
  };
  for (size_t i = 0; i < src.size(); ++i) {
    const int32_t s = src[i], d = dst[i];
    KVFOLD_CHECK(s >= 0 && s < num_blocks_ && d >= 0 && d < num_blocks_ && s != d);
    if (options_.dtype == core::DType::kI8 && (page_of(s) >= 0) != (page_of(d) >= 0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("CopyBlocks: block ", s, " and block ", d, " differ in having an F32 page"));
    }
    for (int layer = 0; layer < num_layers_; ++layer) {
      if (options_.dtype != core::DType::kI8) {
        KVFOLD_RETURN_IF_ERROR(copy(k_cache(layer), s, d));
        KVFOLD_RETURN_IF_ERROR(copy(v_cache(layer), s, d));
        continue;
      }
      const kernels::KvCacheI8 c = int8_cache(layer);
      for (const Tensor* t : {&c.k_codes, &c.v_codes, &c.k_scales, &c.v_scales}) {
        KVFOLD_RETURN_IF_ERROR(copy(*t, s, d));
      }
      if (page_of(s) >= 0) {
        KVFOLD_RETURN_IF_ERROR(copy(c.k_pages, page_of(s), page_of(d)));
        KVFOLD_RETURN_IF_ERROR(copy(c.v_pages, page_of(s), page_of(d)));
      }
    }
  }
  return backend_->Synchronize(*stream_);
}

KvCache::KvCache(BlockPool* pool, const KvPolicy& policy) : pool_(pool), policy_(policy) {}

KvCache::~KvCache() { Clear(); }

size_t KvCache::ResidentBytes() const {
  size_t pages = 0;
  if (pool_->dtype() == core::DType::kI8) {
    for (int32_t b : prefix_blocks_) pages += pool_->page_of(b) >= 0;
    for (int32_t b : main_blocks_) pages += pool_->page_of(b) >= 0;
  }
  return (prefix_blocks_.size() + main_blocks_.size()) * pool_->bytes_per_block() +
         pages * pool_->bytes_per_page();
}

absl::Status KvCache::CopyFrom(const KvCache& other) { return CopyFrom(other, other.main_len_); }

absl::Status KvCache::CopyFrom(const KvCache& other, int main_len) {
  const bool whole = main_len == other.main_len_;
  if (!whole) {
    const int bs = pool_->block_size();
    if (main_len <= 0 || main_len > other.main_len_ || other.main_front_ != 0 ||
        (pool_->dtype() == core::DType::kI8 && main_len % bs != 0)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "KvCache::CopyFrom: cannot copy the first ", main_len, " of ", other.main_len_,
          " main entries (prefix ", other.prefix_len_, ", front ", other.main_front_, ")"));
    }
  }
  if (pool_ != other.pool_ || !(policy_ == other.policy_)) {
    return absl::FailedPreconditionError(
        "KvCache::CopyFrom: the caches do not share a pool and a placement policy");
  }
  if (!prefix_blocks_.empty() || !main_blocks_.empty()) {
    return absl::FailedPreconditionError("KvCache::CopyFrom: this cache is not empty");
  }
  std::vector<int32_t> src = other.prefix_blocks_;
  const size_t main_blocks =
      whole ? other.main_blocks_.size()
            : static_cast<size_t>((main_len + pool_->block_size() - 1) / pool_->block_size());
  src.insert(src.end(), other.main_blocks_.begin(),
             other.main_blocks_.begin() + static_cast<std::ptrdiff_t>(main_blocks));
  if (src.size() > static_cast<size_t>(pool_->free_blocks())) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pool exhausted: copying a cache needs ",
                                                     src.size(), " blocks, ", pool_->free_blocks(),
                                                     " free"));
  }
  std::vector<int32_t> dst;
  dst.reserve(src.size());
  auto undo = [&](absl::Status s) {
    for (int32_t b : dst) pool_->FreeBlock(b);
    return s;
  };
  for (int32_t b : src) {
    dst.push_back(*pool_->AllocateBlock());  // counted above: cannot fail
    if (pool_->page_of(b) >= 0) {
      if (absl::Status s = pool_->AttachPage(dst.back()); !s.ok()) return undo(s);
    }
  }
  if (absl::Status s = pool_->CopyBlocks(src, dst); !s.ok()) return undo(s);
  const auto split = dst.begin() + static_cast<std::ptrdiff_t>(other.prefix_blocks_.size());
  prefix_blocks_.assign(dst.begin(), split);
  main_blocks_.assign(split, dst.end());
  prefix_len_ = other.prefix_len_;
  main_len_ = main_len;
  main_front_ = other.main_front_;
  return absl::OkStatus();
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
  if (pool_->dtype() == core::DType::kI8 && n > 0) {
    // Int8: every block written to needs its F32 page. A partial last block without one
    // was sealed and then truncated (rollback): rebuild its page from the codes.
    if (begin % bs != 0 && pool_->page_of(blocks[begin / bs]) < 0) {
      if (absl::Status s = pool_->AttachPage(blocks[begin / bs], begin % bs); !s.ok()) return s;
    }
    for (int i = 0; i < need; ++i) {
      const int32_t b = *pool_->AllocateBlock();
      if (absl::Status s = pool_->AttachPage(b); !s.ok()) {
        pool_->FreeBlock(b);
        for (int j = 0; j < i; ++j) {
          pool_->FreeBlock(blocks.back());
          blocks.pop_back();
        }
        return s;
      }
      blocks.push_back(b);
    }
  } else {
    for (int i = 0; i < need; ++i) blocks.push_back(*pool_->AllocateBlock());
  }
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
