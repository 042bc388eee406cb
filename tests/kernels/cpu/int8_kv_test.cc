// INT8 KV ops of the CPU backends ("cpu" and "cpu-ref"): StoreKvInt8 against
// kernels/quant's QuantizeKeys/QuantizeValues with fp16 scales (bit for bit);
// AttentionInt8 against the F32 Attention of the same backend run on a cache that holds
// the dequantized entries (DequantizeKeys/DequantizeValues) plus the row's own block from
// its page (bit for bit); the optimised (tiled) kernel against the reference within 1e-5
// (F32 online softmax vs two-pass softmax); and prefill == decode bit for bit through
// StoreKvInt8 + AttentionInt8 on both backends and every ISA path. Odd shapes:
// kv_dim 24 with value groups of 10 (a partial group), block size 5, partial blocks,
// sliding front offsets, prefix + main, rows that own different blocks; and decode rows of
// many sequences read over several KV heads at once give each row's bits alone.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/quant/kv_quant.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace kvfold::kernels {
namespace {

constexpr int kHeads = 6, kKvHeads = 2, kHd = 12, kKvDim = kKvHeads * kHd, kQDim = kHeads * kHd;
constexpr int kBs = 5, kBlocks = 12, kPages = 6, kGroup = 10, kVGroups = 3, kRopeRows = 64;

using testing::HeadMajor;
using testing::IsaScope;
using testing::Random;
using testing::RunnableIsas;

std::vector<float> RopeTable(int rows) { return testing::RopeTable(rows, kHd); }

Tensor T(const void* p, DType dt, std::initializer_list<int64_t> shape) {
  return MakeTensor(const_cast<void*>(p), dt, shape);
}

// An INT8 cache layer over host buffers: codes [blocks, bs, kv_dim], key scales [blocks,
// kv_dim], value scales [blocks, bs, ceil(kv_dim / group)], pages [pages, bs, kv_dim].
KvCacheI8 I8View(const int8_t* k_codes, const int8_t* v_codes, const uint16_t* k_scales,
                 const uint16_t* v_scales, const float* k_pages, const float* v_pages,
                 int64_t blocks, int64_t bs, int64_t kv_dim, int64_t pages, int group) {
  KvCacheI8 c;
  c.k_codes = T(k_codes, DType::kI8, {blocks, bs, kv_dim});
  c.v_codes = T(v_codes, DType::kI8, {blocks, bs, kv_dim});
  c.k_scales = T(k_scales, DType::kF16, {blocks, kv_dim});
  c.v_scales = T(v_scales, DType::kF16, {blocks, bs, quant::NumValueGroups(kv_dim, group)});
  c.k_pages = T(k_pages, DType::kF32, {pages, bs, kv_dim});
  c.v_pages = T(v_pages, DType::kF32, {pages, bs, kv_dim});
  c.value_group = group;
  return c;
}

// A cache's entries quantized with the reference: keys per block of bs entries, values
// in groups of `group` channels, scales as fp16 (what StoreKvInt8 seals).
struct Quantized {
  std::vector<int8_t> kc, vc;
  std::vector<uint16_t> ks, vs;
};
Quantized QuantizeCache(const std::vector<float>& k, const std::vector<float>& v, int64_t blocks,
                        int bs, int kv_dim, int group) {
  Quantized q;
  q.kc.resize(k.size());
  q.vc.resize(v.size());
  std::vector<float> ks(blocks * kv_dim), vs(blocks * bs * quant::NumValueGroups(kv_dim, group));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t off = b * bs * kv_dim;
    EXPECT_TRUE(quant::QuantizeKeys(k.data() + off, bs, kv_dim,
                                    {.group_size = bs, .fp16_scales = true}, q.kc.data() + off,
                                    ks.data() + b * kv_dim)
                    .ok());
  }
  EXPECT_TRUE(quant::QuantizeValues(v.data(), blocks * bs, kv_dim,
                                    {.group_size = group, .fp16_scales = true}, q.vc.data(),
                                    vs.data())
                  .ok());
  for (float x : ks) q.ks.push_back(Fp32ToFp16(x));
  for (float x : vs) q.vs.push_back(Fp32ToFp16(x));
  return q;
}

// Host storage of one int8 cache layer.
struct Cache {
  std::vector<int8_t> k_codes = std::vector<int8_t>(kBlocks * kBs * kKvDim);
  std::vector<int8_t> v_codes = std::vector<int8_t>(kBlocks * kBs * kKvDim);
  std::vector<uint16_t> k_scales = std::vector<uint16_t>(kBlocks * kKvDim);  // fp16
  std::vector<uint16_t> v_scales = std::vector<uint16_t>(kBlocks * kBs * kVGroups);
  std::vector<float> k_pages = std::vector<float>(kPages * kBs * kKvDim);
  std::vector<float> v_pages = std::vector<float>(kPages * kBs * kKvDim);
  KvCacheI8 View() const {
    return I8View(k_codes.data(), v_codes.data(), k_scales.data(), v_scales.data(), k_pages.data(),
                  v_pages.data(), kBlocks, kBs, kKvDim, kPages, kGroup);
  }
};

class Int8KvTest : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<Backend> be = CreateCpuBackend({2, GetParam()});
  std::unique_ptr<Stream> st = be->CreateStream();
};

TEST_P(Int8KvTest, StoreKvInt8WritesPagesAndSealsLikeTheReference) {
  ASSERT_TRUE(be->SupportsInt8Kv());
  Cache c;
  // 7 rows: block 3 (page 1) gets offsets 0..4 (full), block 8 (page 2) offsets 0..1.
  const int n = 7;
  const auto k = Random(n * kKvDim, 1), v = Random(n * kKvDim, 2, 3.0f);
  const std::vector<int32_t> slots = {15, 16, 17, 18, 19, 40, 41};
  const std::vector<int32_t> pages = {1, 1, 1, 1, 1, 2, 2};
  // Seal block 3 whole and block 8 partially (2 entries: a completed prefix).
  const std::vector<SealEntry> seal = {{3, 1, kBs}, {8, 2, 2}};
  ASSERT_TRUE(be->StoreKvInt8(*st, T(k.data(), DType::kF32, {n, kKvDim}),
                              T(v.data(), DType::kF32, {n, kKvDim}),
                              T(slots.data(), DType::kI32, {n}), T(pages.data(), DType::kI32, {n}),
                              T(seal.data(), DType::kI32, {2, kSealFields}), c.View())
                  .ok());
  EXPECT_EQ(0, std::memcmp(c.k_pages.data() + 1 * kBs * kKvDim, k.data(), 5 * kKvDim * 4));
  EXPECT_EQ(
      0, std::memcmp(c.v_pages.data() + 2 * kBs * kKvDim, v.data() + 5 * kKvDim, 2 * kKvDim * 4));
  for (auto [block, row0, count] : {std::tuple{3, 0, kBs}, std::tuple{8, 5, 2}}) {
    std::vector<int8_t> kc(count * kKvDim), vc(count * kKvDim);
    std::vector<float> ks(kKvDim), vs(count * kVGroups);
    ASSERT_TRUE(quant::QuantizeKeys(k.data() + row0 * kKvDim, count, kKvDim,
                                    {.group_size = count, .fp16_scales = true}, kc.data(),
                                    ks.data())
                    .ok());
    ASSERT_TRUE(quant::QuantizeValues(v.data() + row0 * kKvDim, count, kKvDim,
                                      {.group_size = kGroup, .fp16_scales = true}, vc.data(),
                                      vs.data())
                    .ok());
    EXPECT_EQ(0, std::memcmp(c.k_codes.data() + block * kBs * kKvDim, kc.data(), kc.size()));
    EXPECT_EQ(0, std::memcmp(c.v_codes.data() + block * kBs * kKvDim, vc.data(), vc.size()));
    for (int i = 0; i < kKvDim; ++i) EXPECT_EQ(Fp16ToFp32(c.k_scales[block * kKvDim + i]), ks[i]);
    for (size_t i = 0; i < vs.size(); ++i) {
      EXPECT_EQ(Fp16ToFp32(c.v_scales[block * kBs * kVGroups + i]), vs[i]);
    }
  }
  // Range checks.
  const std::vector<SealEntry> bad_seal = {{3, 1, kBs + 1}};
  EXPECT_EQ(be->StoreKvInt8(*st, T(k.data(), DType::kF32, {1, kKvDim}),
                            T(v.data(), DType::kF32, {1, kKvDim}),
                            T(slots.data(), DType::kI32, {1}), T(pages.data(), DType::kI32, {1}),
                            T(bad_seal.data(), DType::kI32, {1, kSealFields}), c.View())
                .code(),
            absl::StatusCode::kOutOfRange);
  const std::vector<int32_t> bad_page = {kPages};
  EXPECT_EQ(
      be->StoreKvInt8(*st, T(k.data(), DType::kF32, {1, kKvDim}),
                      T(v.data(), DType::kF32, {1, kKvDim}), T(slots.data(), DType::kI32, {1}),
                      T(bad_page.data(), DType::kI32, {1}), Tensor(), c.View())
          .code(),
      absl::StatusCode::kOutOfRange);
  KvCacheI8 broken = c.View();
  broken.value_group = 7;  // v_scales no longer match
  EXPECT_EQ(
      be->StoreKvInt8(*st, T(k.data(), DType::kF32, {1, kKvDim}),
                      T(v.data(), DType::kF32, {1, kKvDim}), T(slots.data(), DType::kI32, {1}),
                      T(pages.data(), DType::kI32, {1}), Tensor(), broken)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

// Sealing with kv_dim and value groups multiples of 16 (the AVX-512 path where the CPU has
// it): codes and fp16 scales equal QuantizeKeys / QuantizeValues bit for bit on every ISA
// path, for whole and partial blocks, value groups of 16, 32 and 48 (kv_dim 96: a partial
// last group), and entries that hit every case: an all-zero channel and (groups of 16) an
// all-zero value group (scale 0, codes 0), values whose scales are fp16 subnormals or past fp16's
// range (inf scale), ties x / scale = n + 0.5 (to even), values past the clamp, and NaN / inf.
TEST(Int8KvSealTest, VectorSealEqualsTheReferenceBitForBit) {
  constexpr int bs = 8, kv_dim = 96, num_blocks = 4;
  auto be = CreateCpuBackend({2, false});
  auto st = be->CreateStream();
  for (const int group : {16, 32, 48}) {
    for (const int count : {bs, 3, 1}) {
      SCOPED_TRACE(::testing::Message() << "group " << group << " count " << count);
      const int v_groups = static_cast<int>(quant::NumValueGroups(kv_dim, group));
      auto k = Random(bs * kv_dim, 31, 4.0f), v = Random(bs * kv_dim, 32, 4.0f);
      for (int t = 0; t < bs; ++t) {
        float* kr = k.data() + t * kv_dim;
        float* vr = v.data() + t * kv_dim;
        kr[5] = 0.0f;                               // channel 5: all zero
        kr[17] = 1e-9f * (t + 1);                   // channel 17: an fp16-subnormal scale
        kr[18] = 3e-6f * (t % 3 - 1);               // channel 18: tiny, signed
        kr[40] = 1e7f * (t % 2 ? 1 : -1);           // channel 40: an inf scale
        kr[41] = (t == 0) ? 127.0f : 0.5f * t;      // ties: scale 1, x = n + 0.5
        for (int c = 0; c < 16; ++c) vr[c] = 0.0f;  // groups of 16: group 0 all zero
        vr[20] = (t % 2) ? 2.5f : -3.5f;            // ties in a group of scale 1 ...
        vr[21] = 127.0f;                            // ... fixed by its maximum
        vr[70] = 1e-8f;                             // a group with a subnormal scale
        for (int c = 71; c < 80; ++c) vr[c] = 1e-9f * c;
      }
      k[3 * kv_dim + 60] = std::numeric_limits<float>::quiet_NaN();
      v[2 * kv_dim + 90] = std::numeric_limits<float>::infinity();
      v[1 * kv_dim + 88] = std::numeric_limits<float>::quiet_NaN();
      std::vector<int8_t> kc_ref(count * kv_dim), vc_ref(count * kv_dim);
      std::vector<float> ks_ref(kv_dim), vs_ref(count * v_groups);
      ASSERT_TRUE(quant::QuantizeKeys(k.data(), count, kv_dim,
                                      {.group_size = count, .fp16_scales = true}, kc_ref.data(),
                                      ks_ref.data())
                      .ok());
      ASSERT_TRUE(quant::QuantizeValues(v.data(), count, kv_dim,
                                        {.group_size = group, .fp16_scales = true}, vc_ref.data(),
                                        vs_ref.data())
                      .ok());
      for (cpu::Isa isa : RunnableIsas()) {
        SCOPED_TRACE(cpu::IsaName(isa));
        IsaScope scope(isa);
        std::vector<int8_t> kc(num_blocks * bs * kv_dim, 9), vc(kc.size(), 9);
        std::vector<uint16_t> ks(num_blocks * kv_dim), vs(num_blocks * bs * v_groups);
        std::vector<float> kp(bs * kv_dim), vp(bs * kv_dim);
        const KvCacheI8 c = I8View(kc.data(), vc.data(), ks.data(), vs.data(), kp.data(), vp.data(),
                                   num_blocks, bs, kv_dim, 1, group);
        std::vector<int32_t> slots(count), pages(count, 0);
        for (int t = 0; t < count; ++t) slots[t] = 2 * bs + t;  // block 2, page 0
        const std::vector<SealEntry> seal = {{2, 0, count}};
        ASSERT_TRUE(be->StoreKvInt8(*st, T(k.data(), DType::kF32, {count, kv_dim}),
                                    T(v.data(), DType::kF32, {count, kv_dim}),
                                    T(slots.data(), DType::kI32, {count}),
                                    T(pages.data(), DType::kI32, {count}),
                                    T(seal.data(), DType::kI32, {1, kSealFields}), c)
                        .ok());
        EXPECT_EQ(0, std::memcmp(kc.data() + 2 * bs * kv_dim, kc_ref.data(), kc_ref.size()));
        EXPECT_EQ(0, std::memcmp(vc.data() + 2 * bs * kv_dim, vc_ref.data(), vc_ref.size()));
        for (int i = 0; i < kv_dim; ++i) {
          EXPECT_EQ(ks[2 * kv_dim + i], Fp32ToFp16(ks_ref[i])) << "key channel " << i;
        }
        for (size_t i = 0; i < vs_ref.size(); ++i) {
          EXPECT_EQ(vs[2 * bs * v_groups + i], Fp32ToFp16(vs_ref[i])) << "value scale " << i;
        }
        // Entries past count and other blocks are untouched.
        if (count < bs) {
          EXPECT_EQ(kc[2 * bs * kv_dim + count * kv_dim], 9);
        }
        EXPECT_EQ(kc[0], 9);
      }
    }
  }
}

TEST_P(Int8KvTest, AttentionInt8EqualsF32AttentionOnDequantizedCache) {
  // True F32 entries of every block; all blocks quantized with the reference; pages hold
  // the F32 of the blocks that rows own.
  const auto k_true = Random(kBlocks * kBs * kKvDim, 3);
  const auto v_true = Random(kBlocks * kBs * kKvDim, 4, 2.0f);
  Cache c;
  std::vector<float> ks(c.k_scales.size()), vs(c.v_scales.size());  // the same, as F32
  for (int b = 0; b < kBlocks; ++b) {
    const int64_t off = int64_t{b} * kBs * kKvDim;
    ASSERT_TRUE(quant::QuantizeKeys(k_true.data() + off, kBs, kKvDim,
                                    {.group_size = kBs, .fp16_scales = true},
                                    c.k_codes.data() + off, ks.data() + b * kKvDim)
                    .ok());
    ASSERT_TRUE(quant::QuantizeValues(v_true.data() + off, kBs, kKvDim,
                                      {.group_size = kGroup, .fp16_scales = true},
                                      c.v_codes.data() + off, vs.data() + b * kBs * kVGroups)
                    .ok());
  }
  for (size_t i = 0; i < ks.size(); ++i) c.k_scales[i] = Fp32ToFp16(ks[i]);
  for (size_t i = 0; i < vs.size(); ++i) c.v_scales[i] = Fp32ToFp16(vs[i]);
  std::vector<float> k_deq(k_true.size()), v_deq(v_true.size());
  ASSERT_TRUE(
      quant::DequantizeKeys(c.k_codes.data(), ks.data(), kBlocks * kBs, kKvDim, kBs, k_deq.data())
          .ok());
  ASSERT_TRUE(quant::DequantizeValues(c.v_codes.data(), vs.data(), kBlocks * kBs, kKvDim, kGroup,
                                      v_deq.data())
                  .ok());
  const std::vector<float> rope = RopeTable(kRopeRows);
  // Prefix: blocks {7, 1} (7 entries, stride 1: sink-like). Main: blocks {2, 9, 4, 11},
  // front 3 (a sliding window dropped 3 entries), entries [0, 16).
  const std::vector<int32_t> tables = {7, 1, 2, 9, 4, 11};
  struct RowSpec {
    int prefix, lo, hi, pos_lo, own_block, own_page;
  };
  const std::vector<RowSpec> specs = {
      {7, 0, 1, 7, 2, 0},     // first main entry: own block 2
      {7, 0, 2, 7, 2, 0},     // same own block: shares the group in the optimised kernel
      {7, 2, 9, 9, 9, 3},     // own block 9 (main slots 5..9)
      {0, 4, 11, 0, 4, 1},    // no prefix
      {7, 8, 16, 20, 11, 2},  // last block, partially filled
      {3, 0, 0, 0, 7, 4},     // a prefix row (sink token 2): own prefix block
      {7, 0, 0, 0, 1, 5},     // a prefix row in the second prefix block
  };
  const int n = static_cast<int>(specs.size());
  std::vector<AttnRow> rows(n);
  std::vector<AttnOwnBlock> own(n);
  for (int i = 0; i < n; ++i) {
    rows[i] = {.prefix_table = 0,
               .prefix_visible = specs[i].prefix,
               .prefix_pos_base = 0,
               .prefix_pos_stride = 1,
               .main_table = 2,
               .main_front = 3,
               .main_lo = specs[i].lo,
               .main_hi = specs[i].hi,
               .main_pos_lo = specs[i].pos_lo};
    // Every block's codes are valid here.
    own[i] = {.block = specs[i].own_block, .page = specs[i].own_page, .sealed = 1};
  }
  // Pages: page p holds the TRUE entries of the block that owns it in `specs`.
  for (const RowSpec& sp : specs) {
    const int64_t src = int64_t{sp.own_block} * kBs * kKvDim,
                  dst = int64_t{sp.own_page} * kBs * kKvDim;
    std::copy_n(k_true.begin() + src, kBs * kKvDim, c.k_pages.begin() + dst);
    std::copy_n(v_true.begin() + src, kBs * kKvDim, c.v_pages.begin() + dst);
  }
  const auto q = Random(n * kQDim, 6);
  const AttentionShape shape{kHeads, kKvHeads, kHd, kBs, 1.0f / std::sqrt(12.0f)};
  std::vector<float> out(q.size()), single(q.size());
  auto run = [&](std::vector<float>& dst, int row0, int nrows) {
    return be->AttentionInt8(
        *st, T(q.data() + row0 * kQDim, DType::kF32, {nrows, kQDim}), c.View(),
        T(rows.data() + row0, DType::kI32, {nrows, kAttnRowFields}),
        T(own.data() + row0, DType::kI32, {nrows, kAttnOwnFields}),
        T(tables.data(), DType::kI32, {6}), T(rope.data(), DType::kF32, {kRopeRows, kHd}), shape,
        T(dst.data() + row0 * kQDim, DType::kF32, {nrows, kQDim}));
  };
  ASSERT_TRUE(run(out, 0, n).ok());
  for (int i = 0; i < n; ++i) ASSERT_TRUE(run(single, i, 1).ok());
  // Batch invariance: each row alone gives the same bits.
  EXPECT_EQ(0, std::memcmp(out.data(), single.data(), out.size() * sizeof(float)));
  // Each row against F32 attention on (dequantized cache + own block's true entries).
  for (int i = 0; i < n; ++i) {
    std::vector<float> kc = k_deq, vc = v_deq, ref(kQDim);
    const int64_t b = int64_t{specs[i].own_block} * kBs * kKvDim;
    std::copy_n(k_true.begin() + b, kBs * kKvDim, kc.begin() + b);
    std::copy_n(v_true.begin() + b, kBs * kKvDim, vc.begin() + b);
    // The F32 kernels read blocks head by head.
    kc = HeadMajor(kc, kKvHeads, kBs, kHd);
    vc = HeadMajor(vc, kKvHeads, kBs, kHd);
    ASSERT_TRUE(be->Attention(*st, T(q.data() + i * kQDim, DType::kF32, {1, kQDim}),
                              T(kc.data(), DType::kF32, {kBlocks, kKvHeads, kBs, kHd}),
                              T(vc.data(), DType::kF32, {kBlocks, kKvHeads, kBs, kHd}),
                              T(rows.data() + i, DType::kI32, {1, kAttnRowFields}),
                              T(tables.data(), DType::kI32, {6}),
                              T(rope.data(), DType::kF32, {kRopeRows, kHd}), shape,
                              T(ref.data(), DType::kF32, {1, kQDim}))
                    .ok());
    // Both backends' INT8 kernels follow their F32 kernels operation for operation (the
    // references the plain two-pass softmax, the optimised ones the same tiles): equal bits.
    EXPECT_EQ(0, std::memcmp(ref.data(), out.data() + i * kQDim, kQDim * sizeof(float)))
        << "row " << i;
    // And int8 is really in use: the all-F32 answer differs for rows that read int8.
    std::vector<float> exact(kQDim), k_rows = HeadMajor(k_true, kKvHeads, kBs, kHd),
                                     v_rows = HeadMajor(v_true, kKvHeads, kBs, kHd);
    ASSERT_TRUE(be->Attention(*st, T(q.data() + i * kQDim, DType::kF32, {1, kQDim}),
                              T(k_rows.data(), DType::kF32, {kBlocks, kKvHeads, kBs, kHd}),
                              T(v_rows.data(), DType::kF32, {kBlocks, kKvHeads, kBs, kHd}),
                              T(rows.data() + i, DType::kI32, {1, kAttnRowFields}),
                              T(tables.data(), DType::kI32, {6}),
                              T(rope.data(), DType::kF32, {kRopeRows, kHd}), shape,
                              T(exact.data(), DType::kF32, {1, kQDim}))
                    .ok());
    double max_err = 0;
    for (int j = 0; j < kQDim; ++j)
      max_err = std::max(max_err, double{std::fabs(exact[j] - out[i * kQDim + j])});
    EXPECT_LT(max_err, 0.05) << "row " << i;
    if (i != 5) {
      EXPECT_GT(max_err, 0.0) << "row " << i;  // row 5 reads only its own block
    }
  }
  // Shape checks: own with the wrong row count.
  EXPECT_EQ(be->AttentionInt8(*st, T(q.data(), DType::kF32, {n, kQDim}), c.View(),
                              T(rows.data(), DType::kI32, {n, kAttnRowFields}),
                              T(own.data(), DType::kI32, {1, kAttnOwnFields}),
                              T(tables.data(), DType::kI32, {6}),
                              T(rope.data(), DType::kF32, {kRopeRows, kHd}), shape,
                              T(out.data(), DType::kF32, {n, kQDim}))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A long context (2,000 entries in 400 blocks): the optimised kernel's threaded
// dequantization and attention against the reference kernel, and batch invariance.
TEST(Int8KvLongTest, OptimizedMatchesReferenceAndIsBatchInvariant) {
  constexpr int kLongBlocks = 400, kEntries = kLongBlocks * kBs;
  auto ref = CreateCpuBackend({1, true});
  auto opt = CreateCpuBackend({2, false});
  auto s1 = ref->CreateStream(), s2 = opt->CreateStream();
  const auto k = Random(kEntries * kKvDim, 11), v = Random(kEntries * kKvDim, 12);
  Quantized qc = QuantizeCache(k, v, kLongBlocks, kBs, kKvDim, kGroup);
  std::vector<uint16_t>&ksh = qc.ks, &vsh = qc.vs;
  std::vector<float> pages(kBs * kKvDim, 0.5f);  // own block content of every row: page 0
  const KvCacheI8 c = I8View(qc.kc.data(), qc.vc.data(), ksh.data(), vsh.data(), pages.data(),
                             pages.data(), kLongBlocks, kBs, kKvDim, 1, kGroup);
  std::vector<int32_t> tables(kLongBlocks);
  for (int b = 0; b < kLongBlocks; ++b) tables[b] = (b * 7) % kLongBlocks;  // scattered
  const int last = tables[kLongBlocks - 1];  // open: NaN scales that must never be read
  for (int c = 0; c < kKvDim; ++c) ksh[last * kKvDim + c] = 0x7e00;
  for (int i = 0; i < kBs * kVGroups; ++i) vsh[last * kBs * kVGroups + i] = 0x7e00;
  const int rope_rows = 2048;
  const std::vector<float> rope = RopeTable(rope_rows);
  const std::vector<int> his = {kEntries, 1501, 1500, 1};  // rows 1 and 2 share a block
  const int n = static_cast<int>(his.size());
  std::vector<AttnRow> rows(n);
  std::vector<AttnOwnBlock> own(n);
  for (int i = 0; i < n; ++i) {
    rows[i] = {.main_table = 0, .main_hi = his[i]};
    // The last block is open (its codes are garbage: NaN scales below) and only its own
    // row sees it; every other block is sealed.
    own[i] = {.block = tables[(his[i] - 1) / kBs], .page = 0, .sealed = his[i] != kEntries};
  }
  const auto q = Random(n * kQDim, 13);
  const AttentionShape shape{kHeads, kKvHeads, kHd, kBs, 1.0f / std::sqrt(12.0f)};
  auto run = [&](Backend& be, Stream& st, std::vector<float>& out, int row0, int nrows) {
    return be.AttentionInt8(
        st, T(q.data() + row0 * kQDim, DType::kF32, {nrows, kQDim}), c,
        T(rows.data() + row0, DType::kI32, {nrows, kAttnRowFields}),
        T(own.data() + row0, DType::kI32, {nrows, kAttnOwnFields}),
        T(tables.data(), DType::kI32, {kLongBlocks}), T(rope.data(), DType::kF32, {rope_rows, kHd}),
        shape, T(out.data() + row0 * kQDim, DType::kF32, {nrows, kQDim}));
  };
  std::vector<float> a(q.size()), b(q.size()), single(q.size());
  ASSERT_TRUE(run(*ref, *s1, a, 0, n).ok());
  ASSERT_TRUE(run(*opt, *s2, b, 0, n).ok());
  for (int i = 0; i < n; ++i) ASSERT_TRUE(run(*opt, *s2, single, i, 1).ok());
  EXPECT_EQ(0, std::memcmp(b.data(), single.data(), b.size() * sizeof(float)));
  double max_err = 0;
  for (size_t i = 0; i < a.size(); ++i) max_err = std::max(max_err, double{std::fabs(a[i] - b[i])});
  EXPECT_LT(max_err, 1e-5);
}

// Decode rows of many sequences: with value groups of whole 16-lane vectors, a call of 12
// decode rows runs tasks over all KV heads of a row (the cache read in address order),
// while a row alone runs one task per KV head with 3 KV heads, and two tasks of two heads
// with 4 (the second starting past head 0, value groups of 48 straddling heads), on the
// test's 2 threads. Every row gives the same bits either way on every ISA path, with GQA
// and without, own blocks sealed and open (an open block's codes are garbage that must not
// be read: its rows take the page), tiles across block boundaries (blocks of 8 entries),
// and value groups of 24 (not whole vectors: one head per task in both runs); the
// optimised kernel agrees with the reference within 1e-5.
TEST(Int8KvHeadsTest, DecodeRowsOfManySequencesGiveTheBitsOfEachRowAlone) {
  constexpr int bs = 8, n = 12, blocks_per_row = 6;
  constexpr int num_blocks = n * blocks_per_row + 3;
  auto ref = CreateCpuBackend({1, true});
  auto opt = CreateCpuBackend({2, false});
  auto s1 = ref->CreateStream(), s2 = opt->CreateStream();
  for (const int kv_heads : {3, 4}) {
    for (const int hd : {32, 64, 128}) {
      for (const int heads : {kv_heads, 2 * kv_heads}) {
        for (const int group : {16, 32, 48, 24}) {
          SCOPED_TRACE(::testing::Message() << "kv heads " << kv_heads << " hd " << hd << " heads "
                                            << heads << " value group " << group);
          const int kv_dim = kv_heads * hd, q_dim = heads * hd;
          const int v_groups = static_cast<int>(quant::NumValueGroups(kv_dim, group));
          const auto k = Random(int64_t{num_blocks} * bs * kv_dim, 21);
          const auto v = Random(int64_t{num_blocks} * bs * kv_dim, 22, 2.0f);
          Quantized qc = QuantizeCache(k, v, num_blocks, bs, kv_dim, group);
          std::vector<int8_t>&kc = qc.kc, &vc = qc.vc;
          std::vector<uint16_t>&ksh = qc.ks, &vsh = qc.vs;
          // Row i: its own scattered blocks, entries [lo, len) of len = 20 + 2 i (its last
          // block partly filled for most rows), the last block its own, on page i with the
          // block's true entries. Odd rows' own blocks are open: NaN scales and codes.
          std::vector<int32_t> perm(num_blocks);
          for (int b = 0; b < num_blocks; ++b) perm[b] = (b * 29 + 5) % num_blocks;
          std::vector<int32_t> tables(perm.begin(), perm.begin() + n * blocks_per_row);
          std::vector<float> kp(int64_t{n} * bs * kv_dim), vp(kp.size());
          std::vector<AttnRow> rows(n);
          std::vector<AttnOwnBlock> own(n);
          for (int i = 0; i < n; ++i) {
            const int len = 20 + 2 * i, last = tables[i * blocks_per_row + (len - 1) / bs];
            rows[i] = {.main_table = i * blocks_per_row, .main_lo = i % 3, .main_hi = len};
            own[i] = {.block = last, .page = i, .sealed = i % 2 == 0};
            const int64_t src = int64_t{last} * bs * kv_dim, dst = int64_t{i} * bs * kv_dim;
            std::copy_n(k.begin() + src, bs * kv_dim, kp.begin() + dst);
            std::copy_n(v.begin() + src, bs * kv_dim, vp.begin() + dst);
            if (i % 2 == 1) {
              for (int c = 0; c < kv_dim; ++c) ksh[last * kv_dim + c] = 0x7e00;
              for (int e = 0; e < bs * v_groups; ++e)
                vsh[int64_t{last} * bs * v_groups + e] = 0x7e00;
              std::fill_n(kc.begin() + src, bs * kv_dim, int8_t{-128});
              std::fill_n(vc.begin() + src, bs * kv_dim, int8_t{127});
            }
          }
          const KvCacheI8 c = I8View(kc.data(), vc.data(), ksh.data(), vsh.data(), kp.data(),
                                     vp.data(), num_blocks, bs, kv_dim, n, group);
          const int rope_rows = 64;
          const std::vector<float> rope = testing::RopeTable(rope_rows, hd);
          const auto q = Random(int64_t{n} * q_dim, 23);
          const AttentionShape shape{heads, kv_heads, hd, bs, 1.0f / std::sqrt(float(hd))};
          auto run = [&](Backend& be, Stream& st, std::vector<float>& out, int row0, int nrows) {
            return be.AttentionInt8(
                st, T(q.data() + row0 * q_dim, DType::kF32, {nrows, q_dim}), c,
                T(rows.data() + row0, DType::kI32, {nrows, kAttnRowFields}),
                T(own.data() + row0, DType::kI32, {nrows, kAttnOwnFields}),
                T(tables.data(), DType::kI32, {static_cast<int64_t>(tables.size())}),
                T(rope.data(), DType::kF32, {rope_rows, hd}), shape,
                T(out.data() + row0 * q_dim, DType::kF32, {nrows, q_dim}));
          };
          std::vector<float> expect(q.size());
          ASSERT_TRUE(run(*ref, *s1, expect, 0, n).ok());
          for (cpu::Isa isa : RunnableIsas()) {
            SCOPED_TRACE(cpu::IsaName(isa));
            IsaScope scope(isa);
            std::vector<float> batch(q.size()), single(q.size());
            ASSERT_TRUE(run(*opt, *s2, batch, 0, n).ok());
            for (int i = 0; i < n; ++i) ASSERT_TRUE(run(*opt, *s2, single, i, 1).ok());
            EXPECT_EQ(0, std::memcmp(batch.data(), single.data(), batch.size() * sizeof(float)));
            double max_err = 0;
            for (size_t i = 0; i < batch.size(); ++i) {
              max_err = std::max(max_err, double{std::fabs(batch[i] - expect[i])});
            }
            EXPECT_LT(max_err, 1e-5);
          }
        }
      }
    }
  }
}

// One sequence of 28 entries (main only, scattered blocks, the last one open) written and
// attended to the way the engine does it (batch_plan.cc): each call stores its rows' K/V
// in their blocks' pages, seals the blocks it completes, and every row reads its own
// block from the page. The whole sequence in one call (prefill), one call per token
// (decode) and calls of 6 give the same bits on both backends and every ISA path, with
// and without a sliding window; the optimised kernel agrees with the reference within
// 1e-5.
std::vector<float> RunSequence(Backend& be, int chunk, int window) {
  constexpr int kLen = 28;
  const std::vector<int32_t> tables = {4, 9, 1, 11, 6, 0};  // 30 slots
  auto page = [](int j) { return j / kBs; };                // a page per block (kPages)
  const auto k = Random(kLen * kKvDim, 31), v = Random(kLen * kKvDim, 32, 2.0f);
  const auto q = Random(kLen * kQDim, 33);
  const std::vector<float> rope = RopeTable(kRopeRows);
  const AttentionShape shape{kHeads, kKvHeads, kHd, kBs, 1.0f / std::sqrt(12.0f)};
  auto st = be.CreateStream();
  Cache c;
  std::vector<float> out(kLen * kQDim);
  for (int a = 0; a < kLen; a += chunk) {
    const int n = std::min(chunk, kLen - a);
    std::vector<int32_t> slots(n), pages(n);
    std::vector<AttnRow> rows(n);
    std::vector<AttnOwnBlock> own(n);
    std::vector<SealEntry> seal;
    for (int r = 0; r < n; ++r) {
      const int j = a + r;
      slots[r] = tables[j / kBs] * kBs + j % kBs;
      pages[r] = page(j);
      if (j % kBs == kBs - 1) seal.push_back({tables[j / kBs], page(j), kBs});
      const int lo = window > 0 ? std::max(0, j + 1 - window) : 0;
      rows[r] = {.main_table = 0, .main_lo = lo, .main_hi = j + 1};
    }
    for (int r = 0; r < n; ++r) {
      const int32_t block = tables[(a + r) / kBs];
      const bool sealed = std::any_of(seal.begin(), seal.end(),
                                      [&](const SealEntry& e) { return e.block == block; });
      own[r] = {block, page(a + r), sealed};
    }
    EXPECT_TRUE(be.StoreKvInt8(*st, T(k.data() + a * kKvDim, DType::kF32, {n, kKvDim}),
                               T(v.data() + a * kKvDim, DType::kF32, {n, kKvDim}),
                               T(slots.data(), DType::kI32, {n}), T(pages.data(), DType::kI32, {n}),
                               seal.empty() ? Tensor()
                                            : T(seal.data(), DType::kI32,
                                                {static_cast<int64_t>(seal.size()), kSealFields}),
                               c.View())
                    .ok());
    EXPECT_TRUE(be.AttentionInt8(*st, T(q.data() + a * kQDim, DType::kF32, {n, kQDim}), c.View(),
                                 T(rows.data(), DType::kI32, {n, kAttnRowFields}),
                                 T(own.data(), DType::kI32, {n, kAttnOwnFields}),
                                 T(tables.data(), DType::kI32, {6}),
                                 T(rope.data(), DType::kF32, {kRopeRows, kHd}), shape,
                                 T(out.data() + a * kQDim, DType::kF32, {n, kQDim}))
                    .ok());
  }
  return out;
}

TEST(Int8KvSequenceTest, PrefillEqualsDecodeBitForBitOnBothBackends) {
  auto ref = CreateCpuBackend({1, true});
  for (int window : {0, 12}) {
    SCOPED_TRACE(window);
    const std::vector<float> want = RunSequence(*ref, 1, window);
    EXPECT_EQ(RunSequence(*ref, 28, window), want);
    EXPECT_EQ(RunSequence(*ref, 6, window), want);
    for (cpu::Isa isa : {cpu::Isa::kPortable, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
      if (isa > cpu::CpuBestIsa()) continue;
      SCOPED_TRACE(cpu::IsaName(isa));
      cpu::SetActiveIsaForTesting(isa);
      auto opt = CreateCpuBackend({2, false});
      const std::vector<float> decode = RunSequence(*opt, 1, window);
      EXPECT_EQ(RunSequence(*opt, 28, window), decode);
      EXPECT_EQ(RunSequence(*opt, 6, window), decode);
      double max_err = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        max_err = std::max(max_err, double{std::fabs(want[i] - decode[i])});
      }
      EXPECT_LT(max_err, 1e-5);
    }
    cpu::SetActiveIsaForTesting(cpu::CpuBestIsa());
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Int8KvTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Reference" : "Optimized"; });

}  // namespace
}  // namespace kvfold::kernels
