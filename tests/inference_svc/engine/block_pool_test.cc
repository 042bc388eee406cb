// BlockPool backs the memory of the blocks it hands out ahead of their first writes
// (Backend::Populate): after AllocateBlock, the pages of that block in every layer's K
// and V (or INT8 codes and scales) are resident, while blocks far past it are not.
// PopulateAll backs the whole pool, on another thread while blocks are handed out and
// written, without changing what was written.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/engine/kv_cache.h"
#include "kernels/backend.h"
#include "kernels/cpu/host_memory.h"

namespace kvfold::engine {
namespace {

// True when every page of [p, p + bytes) is resident (mincore).
bool Resident(const void* p, size_t bytes) {
  if (bytes == 0) return false;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page * page;
  std::vector<unsigned char> in((end - begin) / page);
  if (mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) != 0) return false;
  for (unsigned char c : in) {
    if ((c & 1) == 0) return false;
  }
  return true;
}

// Whether block b of a [num_blocks, ...] tensor is resident.
bool BlockResident(const kernels::Tensor& t, int num_blocks, int b) {
  const size_t bytes = t.size_bytes() / static_cast<size_t>(num_blocks);
  return Resident(static_cast<const char*>(t.data) + static_cast<size_t>(b) * bytes, bytes);
}

bool PopulateWorks() {
  // A kernel before Linux 5.14 has no MADV_POPULATE_WRITE: the pool then faults as before.
  void* p = kernels::cpu::AllocateHost(4096);
  const bool ok = kernels::cpu::PopulateHost(p, 4096);
  std::free(p);
  return ok;
}

class BlockPoolPopulateTest : public ::testing::TestWithParam<core::DType> {};

TEST_P(BlockPoolPopulateTest, HandedOutBlocksAreBackedAndFarOnesAreNot) {
  if (!PopulateWorks()) GTEST_SKIP() << "the kernel cannot populate pages (MADV_POPULATE_WRITE)";
  const core::DType dtype = GetParam();
  auto backend = kernels::CreateCpuBackend({1, false});
  // 4,096 blocks: each layer's K is 64 MiB (f32), 32 MiB (f16) or 16 MiB of codes (int8),
  // the whole pool a fresh mapping whose untouched pages are not resident (none of it is
  // touched: a fresh mapping costs address space only).
  const int layers = 2, kv_heads = 4, head_dim = 64, block_size = 16, num_blocks = 4096;
  auto pool = BlockPool::Create(backend.get(), layers, kv_heads, head_dim, block_size, num_blocks,
                                {.dtype = dtype});
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<const kernels::Tensor*> tensors;
  std::vector<kernels::KvCacheI8> i8;
  std::vector<kernels::Tensor> f;
  for (int l = 0; l < layers; ++l) {
    if (dtype == core::DType::kI8) {
      i8.push_back((*pool)->int8_cache(l));
    } else {
      f.push_back((*pool)->k_cache(l));
      f.push_back((*pool)->v_cache(l));
    }
  }
  for (const auto& c : i8) {
    for (const kernels::Tensor* t : {&c.k_codes, &c.v_codes, &c.k_scales, &c.v_scales}) {
      tensors.push_back(t);
    }
  }
  for (const auto& t : f) tensors.push_back(&t);
  const int last = num_blocks - 1;
  for (const kernels::Tensor* t : tensors) {
    EXPECT_FALSE(BlockResident(*t, num_blocks, last));
  }
  // The first blocks: the first hand-out backs them all, in every tensor.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<int32_t> b = (*pool)->AllocateBlock();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(*b, i);
    for (const kernels::Tensor* t : tensors) {
      EXPECT_TRUE(BlockResident(*t, num_blocks, *b)) << "block " << *b;
    }
  }
  // The middle block was never handed out, so it stays unbacked in every tensor far
  // larger than a huge page (a small one, such as the INT8 scales, and a tensor's last
  // blocks may share a huge page with the backed first blocks of the next tensor).
  for (const kernels::Tensor* t : tensors) {
    if (t->size_bytes() >= (size_t{8} << 20)) {
      EXPECT_FALSE(BlockResident(*t, num_blocks, num_blocks / 2));
    }
  }
  // A freed block comes back first and is still backed; the next new block is too.
  (*pool)->FreeBlock(1);
  EXPECT_EQ(*(*pool)->AllocateBlock(), 1);
  absl::StatusOr<int32_t> next = (*pool)->AllocateBlock();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, 3);
  for (const kernels::Tensor* t : tensors) {
    EXPECT_TRUE(BlockResident(*t, num_blocks, *next));
  }
}

// Every block-indexed tensor of the pool.
std::vector<kernels::Tensor> BlockTensors(const BlockPool& pool, int layers) {
  std::vector<kernels::Tensor> out;
  for (int l = 0; l < layers; ++l) {
    if (pool.dtype() == core::DType::kI8) {
      const kernels::KvCacheI8 c = pool.int8_cache(l);
      for (const kernels::Tensor* t : {&c.k_codes, &c.v_codes, &c.k_scales, &c.v_scales}) {
        out.push_back(*t);
      }
    } else {
      out.push_back(pool.k_cache(l));
      out.push_back(pool.v_cache(l));
    }
  }
  return out;
}

TEST_P(BlockPoolPopulateTest, PopulateAllBacksEveryBlockBesideHandOutsAndKeepsWrites) {
  if (!PopulateWorks()) GTEST_SKIP() << "the kernel cannot populate pages (MADV_POPULATE_WRITE)";
  auto backend = kernels::CreateCpuBackend({1, false});
  const int layers = 2, kv_heads = 4, head_dim = 64, block_size = 16, num_blocks = 1024;
  auto pool = BlockPool::Create(backend.get(), layers, kv_heads, head_dim, block_size, num_blocks,
                                {.dtype = GetParam()});
  ASSERT_TRUE(pool.ok()) << pool.status();
  const std::vector<kernels::Tensor> tensors = BlockTensors(**pool, layers);

  // Asked to stop before it starts: nothing is backed by it.
  const std::atomic<bool> stopped{true};
  EXPECT_FALSE((*pool)->PopulateAll(stopped));
  EXPECT_EQ((*pool)->populated_blocks(), 0);

  // The owner hands out blocks and writes every byte of them in every tensor while
  // another thread populates the pool.
  const std::atomic<bool> go_on{false};
  bool all = false;
  std::thread populate([&] { all = (*pool)->PopulateAll(go_on); });
  std::vector<int32_t> blocks;
  for (int i = 0; i < 300; ++i) {
    absl::StatusOr<int32_t> b = (*pool)->AllocateBlock();
    ASSERT_TRUE(b.ok()) << b.status();
    blocks.push_back(*b);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const size_t bytes = tensors[t].size_bytes() / num_blocks;
      std::memset(static_cast<char*>(tensors[t].data) + *b * bytes,
                  static_cast<int>(1 + (*b + t) % 251), bytes);
    }
  }
  populate.join();
  EXPECT_TRUE(all);
  EXPECT_EQ((*pool)->populated_blocks(), num_blocks);
  for (const kernels::Tensor& t : tensors) {
    EXPECT_TRUE(BlockResident(t, num_blocks, num_blocks - 1));
    EXPECT_TRUE(BlockResident(t, num_blocks, num_blocks / 2));
  }
  for (int32_t b : blocks) {
    for (size_t t = 0; t < tensors.size(); ++t) {
      const size_t bytes = tensors[t].size_bytes() / num_blocks;
      const auto* p = static_cast<const unsigned char*>(tensors[t].data) + b * bytes;
      const unsigned char want = static_cast<unsigned char>(1 + (b + t) % 251);
      size_t bad = 0;
      for (size_t i = 0; i < bytes; ++i) bad += p[i] != want;
      ASSERT_EQ(bad, 0u) << "block " << b << " tensor " << t;
    }
  }
  // Already backed: a second call returns at once.
  EXPECT_TRUE((*pool)->PopulateAll(go_on));
}

INSTANTIATE_TEST_SUITE_P(KvDTypes, BlockPoolPopulateTest,
                         ::testing::Values(core::DType::kF32, core::DType::kF16, core::DType::kI8));

}  // namespace
}  // namespace kvfold::engine
