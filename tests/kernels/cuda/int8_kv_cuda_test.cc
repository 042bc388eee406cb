// The CUDA backend's INT8 KV ops (kernels/backend.h StoreKvInt8 / AttentionInt8) against
// the CPU reference backend ("cpu-ref") on the same inputs. Label gpu; skips without a
// device.
//
// - StoreKvInt8: pages, codes and fp16 scales BIT-IDENTICAL to the CPU (whole buffers are
//   compared, so what the op must not touch is checked too). Odd shapes: kv_dim 126
//   (3 kv heads of 42) with value groups of 20 (a partial group of 6), block size 7,
//   partial seals (a completed prefix), a seal-only call, an outlier channel, an all-zero
//   channel (scale 0), a subnormal fp16 scale and an fp16-overflowing one.
// - AttentionInt8: |gpu - cpu| <= 5e-5 + 5e-4 |cpu| (F32 online softmax vs the CPU's
//   two-pass softmax over up to 1,121 keys; both dequantize with the same code * scale).
//   GQA 9 / 3 heads, prefix (memory slots, stride 0) + sliding main window with a dropped
//   front, causal prefill rows whose own blocks change, memory-expansion rows, a sink
//   sequence, an empty row, and an OPEN own block whose codes are garbage with NaN scales
//   (only its own rows see it, read from the page): any read of those codes shows as NaN.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/quant/kv_quant.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace kvfold::kernels {
namespace {

constexpr int kHeads = 9, kKvHeads = 3, kHd = 42;
constexpr int kKvDim = kKvHeads * kHd, kQDim = kHeads * kHd;
constexpr int kBs = 7, kGroup = 20, kVGroups = 7;
static_assert((kKvDim + kGroup - 1) / kGroup == kVGroups);

// Host contents of one int8 cache layer.
struct HostCache {
  HostCache(int blocks, int pages)
      : num_blocks(blocks),
        num_pages(pages),
        k_codes(static_cast<size_t>(blocks) * kBs * kKvDim),
        v_codes(k_codes.size()),
        k_scales(static_cast<size_t>(blocks) * kKvDim),
        v_scales(static_cast<size_t>(blocks) * kBs * kVGroups),
        k_pages(static_cast<size_t>(pages) * kBs * kKvDim),
        v_pages(k_pages.size()) {}
  int num_blocks, num_pages;
  std::vector<int8_t> k_codes, v_codes;
  std::vector<uint16_t> k_scales, v_scales;  // fp16 bits
  std::vector<float> k_pages, v_pages;
};

// A backend, its stream and the device buffers a test uploaded (kept alive with it).
class Side {
 public:
  explicit Side(std::unique_ptr<Backend> be) : be_(std::move(be)), st_(be_->CreateStream()) {}
  Backend& be() { return *be_; }
  Stream& st() { return *st_; }

  Tensor Upload(const void* host, DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t = MakeTensor(nullptr, dtype, shape);
    auto buffer = be_->Allocate(std::max<size_t>(t.size_bytes(), 4));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return Tensor();
    t.data = (*buffer)->data();
    if (t.size_bytes() > 0) {
      const absl::Status s = be_->CopyToDevice(*st_, host, t);
      EXPECT_TRUE(s.ok()) << s;
    }
    buffers_.push_back(*std::move(buffer));
    return t;
  }
  template <typename T>
  Tensor Upload(const std::vector<T>& host, DType dtype, std::initializer_list<int64_t> shape) {
    return Upload(host.data(), dtype, shape);
  }
  template <typename T>
  void Download(Tensor t, std::vector<T>* host) {
    host->resize(t.size_bytes() / sizeof(T));
    absl::Status s = be_->CopyToHost(*st_, t, host->data());
    EXPECT_TRUE(s.ok()) << s;
    s = be_->Synchronize(*st_);
    EXPECT_TRUE(s.ok()) << s;
  }

  KvCacheI8 UploadCache(const HostCache& h) {
    KvCacheI8 c;
    c.k_codes = Upload(h.k_codes, DType::kI8, {h.num_blocks, kBs, kKvDim});
    c.v_codes = Upload(h.v_codes, DType::kI8, {h.num_blocks, kBs, kKvDim});
    c.k_scales = Upload(h.k_scales, DType::kF16, {h.num_blocks, kKvDim});
    c.v_scales = Upload(h.v_scales, DType::kF16, {h.num_blocks, kBs, kVGroups});
    c.k_pages = Upload(h.k_pages, DType::kF32, {h.num_pages, kBs, kKvDim});
    c.v_pages = Upload(h.v_pages, DType::kF32, {h.num_pages, kBs, kKvDim});
    c.value_group = kGroup;
    return c;
  }
  HostCache DownloadCache(const KvCacheI8& c) {
    HostCache h(static_cast<int>(c.k_codes.dim(0)), static_cast<int>(c.k_pages.dim(0)));
    Download(c.k_codes, &h.k_codes);
    Download(c.v_codes, &h.v_codes);
    Download(c.k_scales, &h.k_scales);
    Download(c.v_scales, &h.v_scales);
    Download(c.k_pages, &h.k_pages);
    Download(c.v_pages, &h.v_pages);
    return h;
  }

 private:
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Stream> st_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

std::unique_ptr<Side> GpuSide() {
  auto be = CreateBackend("cuda:0", 1);
  EXPECT_TRUE(be.ok()) << be.status();
  if (!be.ok()) return nullptr;
  EXPECT_TRUE((*be)->SupportsInt8Kv());
  return std::make_unique<Side>(*std::move(be));
}

std::unique_ptr<Side> CpuSide() {
  return std::make_unique<Side>(CreateCpuBackend({.num_threads = 1, .reference = true}));
}

template <typename T>
void ExpectSameBits(const std::vector<T>& gpu, const std::vector<T>& cpu, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << gpu.size()
                     << " elements differ, first at " << first;
}

void ExpectSameCache(const HostCache& gpu, const HostCache& cpu) {
  ExpectSameBits(gpu.k_pages, cpu.k_pages, "k_pages");
  ExpectSameBits(gpu.v_pages, cpu.v_pages, "v_pages");
  ExpectSameBits(gpu.k_codes, cpu.k_codes, "k_codes");
  ExpectSameBits(gpu.v_codes, cpu.v_codes, "v_codes");
  ExpectSameBits(gpu.k_scales, cpu.k_scales, "k_scales");
  ExpectSameBits(gpu.v_scales, cpu.v_scales, "v_scales");
}

TEST(CudaInt8Kv, StoreKvInt8BitIdenticalToCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  auto gpu = GpuSide();
  ASSERT_TRUE(gpu);
  auto cpu = CpuSide();
  constexpr int kBlocks = 23, kPages = 9;
  // Arbitrary prior contents: whatever the op must not touch stays as it was on both.
  HostCache init(kBlocks, kPages);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (auto& c : init.k_codes) c = static_cast<int8_t>(rng());
  for (auto& c : init.v_codes) c = static_cast<int8_t>(rng());
  for (auto& s : init.k_scales) s = Fp32ToFp16(unit(rng));
  for (auto& s : init.v_scales) s = Fp32ToFp16(unit(rng));
  init.k_pages = cuda::testing::RandomFloats(init.k_pages.size(), 6);
  init.v_pages = cuda::testing::RandomFloats(init.v_pages.size(), 7);

  // 45 rows: row i -> page i / 7 (pages 0..6) at offset i % 7 of block page_block[page].
  const std::vector<int32_t> page_block = {3, 17, 0, 22, 9, 11, 5};
  const int n = 45;
  std::vector<int32_t> slots(n), pages(n);
  for (int i = 0; i < n; ++i) {
    pages[i] = i / kBs;
    slots[i] = page_block[pages[i]] * kBs + i % kBs;
  }
  auto k = cuda::testing::RandomFloats(static_cast<size_t>(n) * kKvDim, 8, -4, 4);
  auto v = cuda::testing::RandomFloats(static_cast<size_t>(n) * kKvDim, 9, -4, 4);
  for (int i = 0; i < n; ++i) {
    float* kr = &k[static_cast<size_t>(i) * kKvDim];
    float* vr = &v[static_cast<size_t>(i) * kKvDim];
    kr[0] *= 30;                      // outlier channel
    kr[5] = 0;                        // all-zero channel: scale 0, codes 0
    kr[7] = 3e-5f * (i % 3 - 1);      // amax / 127 is an fp16 subnormal
    if (i % kBs == 2) kr[9] = 1e7f;   // amax / 127 overflows fp16: scale inf, codes 0
    for (int c = 40; c < 60; ++c) vr[c] = 0;  // a whole zero value group (channels 40..59)
    vr[121] *= 50;                    // outlier in the partial last value group
  }
  // Full seals, a partial one (a completed prefix of 4), a single entry, and page 4
  // (block 9) left open.
  const std::vector<SealEntry> seal = {{3, 0, 7}, {17, 1, 7}, {0, 2, 4},
                                       {22, 3, 1}, {11, 5, 7}, {5, 6, 3}};
  const int num_seal = static_cast<int>(seal.size());

  std::vector<HostCache> results;
  for (Side* side : {gpu.get(), cpu.get()}) {
    const KvCacheI8 c = side->UploadCache(init);
    const Tensor tk = side->Upload(k, DType::kF32, {n, kKvDim});
    const Tensor tv = side->Upload(v, DType::kF32, {n, kKvDim});
    const Tensor ts = side->Upload(slots, DType::kI32, {n});
    const Tensor tp = side->Upload(pages, DType::kI32, {n});
    const Tensor tseal = side->Upload(seal, DType::kI32, {num_seal, kSealFields});
    absl::Status s = side->be().StoreKvInt8(side->st(), tk, tv, ts, tp, tseal, c);
    ASSERT_TRUE(s.ok()) << side->be().Name() << ": " << s;
    // A seal-only call (no rows): block 9 from page 4, 5 entries.
    const std::vector<SealEntry> seal2 = {{9, 4, 5}};
    s = side->be().StoreKvInt8(side->st(), tk.Rows(0, 0), tv.Rows(0, 0), ts.Rows(0, 0),
                               tp.Rows(0, 0),
                               side->Upload(seal2, DType::kI32, {1, kSealFields}), c);
    ASSERT_TRUE(s.ok()) << side->be().Name() << ": " << s;
    results.push_back(side->DownloadCache(c));
  }
  ExpectSameCache(results[0], results[1]);
  // The op did write (a meaningful comparison): page 0 holds rows 0..6.
  EXPECT_EQ(0, std::memcmp(results[1].k_pages.data(), k.data(), kBs * kKvDim * sizeof(float)));
  EXPECT_NE(results[1].k_codes, init.k_codes);

  // Shape errors are InvalidArgument before any launch.
  KvCacheI8 broken = gpu->UploadCache(init);
  broken.value_group = 7;  // v_scales no longer match
  EXPECT_EQ(gpu->be()
                .StoreKvInt8(gpu->st(), gpu->Upload(k, DType::kF32, {1, kKvDim}),
                             gpu->Upload(v, DType::kF32, {1, kKvDim}),
                             gpu->Upload(slots, DType::kI32, {1}),
                             gpu->Upload(pages, DType::kI32, {1}), Tensor(), broken)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The attention fixture: a pool of int8 blocks quantized from TRUE entries with the CPU
// reference (kv_quant, fp16 scales); own blocks' pages hold the true entries.
struct AttnCase {
  static constexpr int kBlocks = 200, kRopeRows = 1200;
  HostCache cache{kBlocks, 16};
  std::vector<float> k_true, v_true;  // [kBlocks * kBs, kKvDim]
  std::vector<int32_t> tables;
  std::vector<AttnRow> rows;
  std::vector<AttnOwnBlock> own;
  std::map<int32_t, int32_t> page_of;  // own block -> page
  int n = 0;

  int32_t PageOf(int32_t block) {
    auto it = page_of.find(block);
    if (it != page_of.end()) return it->second;
    const int32_t page = static_cast<int32_t>(page_of.size());
    EXPECT_LT(page, cache.num_pages);
    const size_t src = static_cast<size_t>(block) * kBs * kKvDim;
    const size_t dst = static_cast<size_t>(page) * kBs * kKvDim;
    std::copy_n(k_true.begin() + src, kBs * kKvDim, cache.k_pages.begin() + dst);
    std::copy_n(v_true.begin() + src, kBs * kKvDim, cache.v_pages.begin() + dst);
    page_of[block] = page;
    return page;
  }
  void AddRow(const AttnRow& row, int32_t own_block, bool sealed) {
    rows.push_back(row);
    own.push_back({own_block, own_block >= 0 ? PageOf(own_block) : -1, sealed ? 1 : 0});
    ++n;
  }
};

AttnCase MakeAttnCase() {
  AttnCase a;
  const int slots = AttnCase::kBlocks * kBs;
  a.k_true = cuda::testing::RandomFloats(static_cast<size_t>(slots) * kKvDim, 21);
  a.v_true = cuda::testing::RandomFloats(static_cast<size_t>(slots) * kKvDim, 22, -2, 2);
  for (int b = 0; b < AttnCase::kBlocks; ++b) {
    const size_t off = static_cast<size_t>(b) * kBs * kKvDim;
    std::vector<float> ks(kKvDim), vs(kBs * kVGroups);
    EXPECT_TRUE(quant::QuantizeKeys(&a.k_true[off], kBs, kKvDim,
                                    {.group_size = kBs, .fp16_scales = true},
                                    &a.cache.k_codes[off], ks.data())
                    .ok());
    EXPECT_TRUE(quant::QuantizeValues(&a.v_true[off], kBs, kKvDim,
                                      {.group_size = kGroup, .fp16_scales = true},
                                      &a.cache.v_codes[off], vs.data())
                    .ok());
    for (int c = 0; c < kKvDim; ++c) a.cache.k_scales[b * kKvDim + c] = Fp32ToFp16(ks[c]);
    for (int i = 0; i < kBs * kVGroups; ++i) {
      a.cache.v_scales[b * kBs * kVGroups + i] = Fp32ToFp16(vs[i]);
    }
  }
  // Sequence A: prefix = 5 memory slots (block 0, stride 0); main = 161 scattered blocks,
  // 4 front slots dropped, logical entries [0, 1123). Its last block is OPEN: garbage
  // codes with NaN scales that only its own rows may see (from the page).
  // Sequence B (sink): prefix 4 entries (block 1, stride 1), main 50 entries in 8 blocks.
  std::vector<int32_t> perm(AttnCase::kBlocks - 2);
  std::iota(perm.begin(), perm.end(), 2);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(23));
  const int a_prefix = 0, a_main = 1, a_blocks = 161, b_prefix = 162, b_main = 163;
  a.tables.push_back(0);
  a.tables.insert(a.tables.end(), perm.begin(), perm.begin() + a_blocks);
  a.tables.push_back(1);
  a.tables.insert(a.tables.end(), perm.begin() + a_blocks, perm.begin() + a_blocks + 8);
  const int front = 4, a_len = a_blocks * kBs - front;  // 1123
  const int32_t open_block = a.tables[a_main + a_blocks - 1];
  for (int c = 0; c < kKvDim; ++c) a.cache.k_scales[open_block * kKvDim + c] = 0x7e00;
  for (int i = 0; i < kBs * kVGroups; ++i) a.cache.v_scales[open_block * kBs * kVGroups + i] = 0x7e00;
  auto own_a = [&](int j) { return a.tables[a_main + (front + j) / kBs]; };
  // Decode of the newest entry over everything (memory at position 0, main from 1).
  const AttnRow a_row{.prefix_table = a_prefix,
                      .prefix_visible = 5,
                      .main_table = a_main,
                      .main_front = front,
                      .main_pos_lo = 1};
  AttnRow decode = a_row;
  decode.main_hi = a_len;
  a.AddRow(decode, own_a(a_len - 1), false);
  // A causal prefill of the last 30 entries with a 1000-entry sliding window: own blocks
  // change along the rows, the last 7 rows own the open block.
  for (int j = a_len - 30; j < a_len; ++j) {
    const int lo = std::max(0, j + 1 - 1000);
    const int32_t ob = own_a(j);
    AttnRow prefill = a_row;
    prefill.main_lo = lo;
    prefill.main_hi = j + 1;
    prefill.main_pos_lo = 1 + lo;
    a.AddRow(prefill, ob, ob != open_block);
  }
  // Memory expansion: the 5 memory rows see the whole prefix (bidirectional), no main.
  for (int i = 0; i < 5; ++i) a.AddRow(a_row, 0, true);
  // Nothing visible: zeros.
  AttnRow empty = a_row;
  empty.prefix_visible = 0;
  a.AddRow(empty, -1, true);
  // Sink + window: 4 sink tokens at positions 0..3, main entries [20, 50) at 24..53.
  a.AddRow({.prefix_table = b_prefix,
            .prefix_visible = 4,
            .prefix_pos_stride = 1,
            .main_table = b_main,
            .main_lo = 20,
            .main_hi = 50,
            .main_pos_lo = 24},
           a.tables[b_main + 49 / kBs], true);
  return a;
}

TEST(CudaInt8Kv, AttentionInt8MatchesCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  auto gpu = GpuSide();
  ASSERT_TRUE(gpu);
  auto cpu = CpuSide();
  AttnCase a = MakeAttnCase();
  const auto q = cuda::testing::RandomFloats(static_cast<size_t>(a.n) * kQDim, 24);
  const auto rope = cuda::testing::RopeTable(AttnCase::kRopeRows, kHd);
  const AttentionShape shape{kHeads, kKvHeads, kHd, kBs, 1.0f / std::sqrt(float{kHd})};
  const int num_tables = static_cast<int>(a.tables.size());

  // Rows [row0, row0 + count) on a side.
  auto run = [&](Side& side, int row0, int count, std::vector<float>* out) {
    const KvCacheI8 c = side.UploadCache(a.cache);
    const Tensor tq = side.Upload(q.data() + static_cast<size_t>(row0) * kQDim, DType::kF32,
                                  {count, kQDim});
    const Tensor trows =
        side.Upload(a.rows.data() + row0, DType::kI32, {count, kAttnRowFields});
    const Tensor town = side.Upload(a.own.data() + row0, DType::kI32, {count, kAttnOwnFields});
    const Tensor ttables = side.Upload(a.tables, DType::kI32, {num_tables});
    const Tensor trope = side.Upload(rope, DType::kF32, {AttnCase::kRopeRows, kHd});
    std::vector<float> zeros(static_cast<size_t>(count) * kQDim, 0.0f);
    const Tensor tout = side.Upload(zeros, DType::kF32, {count, kQDim});
    const absl::Status s =
        side.be().AttentionInt8(side.st(), tq, c, trows, town, ttables, trope, shape, tout);
    ASSERT_TRUE(s.ok()) << side.be().Name() << ": " << s;
    side.Download(tout, out);
  };
  std::vector<float> ref, got, got_row0;
  run(*cpu, 0, a.n, &ref);
  run(*gpu, 0, a.n, &got);
  run(*gpu, 0, 1, &got_row0);  // one row alone: the most splits
  ASSERT_EQ(ref.size(), got.size());
  const std::vector<double> ref_d(ref.begin(), ref.end());
  cuda::testing::ExpectClose(got, ref_d, 5e-5, 5e-4, "AttentionInt8 batch");
  cuda::testing::ExpectClose(got_row0, std::vector<double>(ref_d.begin(), ref_d.begin() + kQDim),
                             5e-5, 5e-4, "AttentionInt8 single decode row");
  // The empty row is exactly zero.
  const int empty_row = a.n - 2;
  for (int i = 0; i < kQDim; ++i) EXPECT_EQ(got[static_cast<size_t>(empty_row) * kQDim + i], 0.0f);

  // Shape errors: `own` with the wrong row count.
  const KvCacheI8 c = gpu->UploadCache(a.cache);
  EXPECT_EQ(gpu->be()
                .AttentionInt8(gpu->st(), gpu->Upload(q, DType::kF32, {a.n, kQDim}), c,
                               gpu->Upload(a.rows, DType::kI32, {a.n, kAttnRowFields}),
                               gpu->Upload(a.own, DType::kI32, {1, kAttnOwnFields}),
                               gpu->Upload(a.tables, DType::kI32, {num_tables}),
                               gpu->Upload(rope, DType::kF32, {AttnCase::kRopeRows, kHd}), shape,
                               gpu->Upload(q, DType::kF32, {a.n, kQDim}))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvfold::kernels
