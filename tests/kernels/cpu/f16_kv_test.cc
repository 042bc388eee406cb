// The fp16 KV cache on the CPU backends: StoreKv rounds each value to the nearest fp16
// (ties to even) with the same bits on every ISA path and on both backends; Attention and
// AttentionPart over an fp16 cache give exactly the bits of the F32 kernels over a cache
// holding the widened values, row by row whatever the batch; mixed or unsupported cache
// types are refused.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace kvfold::kernels {
namespace {

using core::DType;
using testing::IsaScope;
using testing::Random;
using testing::Rig;
using testing::RopeTable;
using testing::RunnableIsas;
using testing::T;

// Values that probe the rounding: ties between fp16 neighbours (to even), fp16 subnormals,
// the overflow edge, signed zeros, and random values at several scales.
std::vector<float> RoundingProbes(size_t n) {
  std::vector<float> v = {1.0f + 1.0f / 2048,  // tie: 1 and 1 + 2^-10, to even (1)
                          1.0f + 3.0f / 2048,  // tie, to even (1 + 2^-9)
                          -(1.0f + 1.0f / 2048),
                          6.1e-5f,
                          3.0e-8f,
                          5.96e-8f,
                          -2.9e-8f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e9f,
                          -1e9f,
                          0.0f,
                          -0.0f};
  const auto r = Random(n, 7, 300.0f);
  for (size_t i = v.size(); i < n; ++i) v.push_back(r[i] * (i % 3 == 0 ? 1e-3f : 1.0f));
  v.resize(n);
  return v;
}

// StoreKv puts channel c of a row at head c / hd, element c % hd of the slot's entry in
// its block's head-major layout (FloatKvIndex), F32 as given and fp16 rounded.
TEST(F16KvTest, StoreRoundsToNearestEvenOnEveryPathAndBackend) {
  Rig r;
  // hd 37: a 16-lane and a 5-lane tail per head.
  const int heads = 3, hd = 37, kv_dim = heads * hd, blocks = 3, bs = 4, n = 5;
  const auto k = RoundingProbes(static_cast<size_t>(n) * kv_dim);
  auto v = k;
  std::reverse(v.begin(), v.end());
  const std::vector<int32_t> slots = {7, 0, 11, 3, 4};
  auto at = [&](int64_t slot, int c) { return FloatKvIndex(slot, c / hd, c % hd, heads, bs, hd); };
  std::vector<uint16_t> want_k(blocks * bs * kv_dim, 0), want_v(want_k.size(), 0);
  std::vector<float> want_k32(want_k.size(), 0.0f), want_v32(want_k.size(), 0.0f);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < kv_dim; ++c) {
      want_k[at(slots[i], c)] = Fp32ToFp16(k[i * kv_dim + c]);
      want_v[at(slots[i], c)] = Fp32ToFp16(v[i * kv_dim + c]);
      want_k32[at(slots[i], c)] = k[i * kv_dim + c];
      want_v32[at(slots[i], c)] = v[i * kv_dim + c];
    }
  }
  EXPECT_EQ(want_k[at(7, 0)], 0x3c00);  // the ties went to even
  EXPECT_EQ(want_k[at(7, 1)], 0x3c02);
  EXPECT_EQ(want_k[at(7, 9)], 0x7c00);       // 65520 overflows to inf
  EXPECT_EQ(at(7, hd) - at(7, 0), bs * hd);  // an entry's next head: a block's head further
  for (cpu::Isa isa : RunnableIsas()) {
    SCOPED_TRACE(cpu::IsaName(isa));
    IsaScope scope(isa);
    for (Backend* be : {r.ref.get(), r.opt.get()}) {
      SCOPED_TRACE(be->Name());
      std::unique_ptr<Stream> st = be->CreateStream();
      const Tensor kt = T(const_cast<float*>(k.data()), DType::kF32, {n, kv_dim});
      const Tensor vt = T(v.data(), DType::kF32, {n, kv_dim});
      const Tensor sl = T(const_cast<int32_t*>(slots.data()), DType::kI32, {n});
      std::vector<uint16_t> kc(want_k.size(), 0), vc(want_v.size(), 0);
      ASSERT_TRUE(be->StoreKv(*st, kt, vt, sl, T(kc.data(), DType::kF16, {blocks, heads, bs, hd}),
                              T(vc.data(), DType::kF16, {blocks, heads, bs, hd}))
                      .ok());
      EXPECT_EQ(kc, want_k);
      EXPECT_EQ(vc, want_v);
      std::vector<float> kc32(want_k32.size(), 0.0f), vc32(want_v32.size(), 0.0f);
      ASSERT_TRUE(be->StoreKv(*st, kt, vt, sl, T(kc32.data(), DType::kF32, {blocks, heads, bs, hd}),
                              T(vc32.data(), DType::kF32, {blocks, heads, bs, hd}))
                      .ok());
      EXPECT_EQ(0, std::memcmp(kc32.data(), want_k32.data(), kc32.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(vc32.data(), want_v32.data(), vc32.size() * sizeof(float)));
    }
  }
}

TEST(F16KvTest, BadCachesAreRefused) {
  Rig r;
  const int kv_dim = 8, n = 2;
  std::vector<float> k(n * kv_dim, 1.0f), f32_cache(4 * kv_dim);
  std::vector<uint16_t> h(4 * kv_dim);
  std::vector<int32_t> slots = {0, 3};
  auto kt = T(k.data(), DType::kF32, {n, kv_dim});
  auto st = T(slots.data(), DType::kI32, {n});
  auto half = T(h.data(), DType::kF16, {1, 2, 4, kv_dim / 2});
  auto f32 = T(f32_cache.data(), DType::kF32, {1, 2, 4, kv_dim / 2});
  auto bf16 = T(h.data(), DType::kBF16, {1, 2, 4, kv_dim / 2});
  auto rank3 = T(h.data(), DType::kF16, {1, 4, kv_dim});  // not [blocks, heads, bs, hd]
  for (Backend* be : {r.ref.get(), r.opt.get()}) {
    SCOPED_TRACE(be->Name());
    EXPECT_TRUE(be->SupportsF16Kv());
    std::unique_ptr<Stream> s = be->CreateStream();
    EXPECT_EQ(be->StoreKv(*s, kt, kt, st, half, f32).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(be->StoreKv(*s, kt, kt, st, bf16, bf16).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(be->StoreKv(*s, kt, kt, st, rank3, rank3).code(), absl::StatusCode::kInvalidArgument);
    slots[1] = 4;  // past the cache
    EXPECT_EQ(be->StoreKv(*s, kt, kt, st, half, half).code(), absl::StatusCode::kOutOfRange);
    slots[1] = 3;
    EXPECT_TRUE(be->StoreKv(*s, kt, kt, st, half, half).ok());
  }
}

// Paged attention inputs over one cache of both types: the fp16 one and its exact F32
// widening.
struct Case {
  int heads, kv_heads, hd, bs = 16, blocks = 8, n = 70, prefix = 3;
  std::vector<uint16_t> kh, vh;
  std::vector<float> kw, vw, q, rope;
  std::vector<int32_t> tables = {6, 3, 0, 7, 1, 5, 2};  // prefix: {6}; main: the rest
  std::vector<AttnRow> rows;
  AttentionShape shape;

  Case(int heads_, int kv_heads_, int hd_) : heads(heads_), kv_heads(kv_heads_), hd(hd_) {
    const int kv_dim = kv_heads * hd;
    const auto k = Random(static_cast<size_t>(blocks) * bs * kv_dim, 21, 2.0f);
    const auto v = Random(k.size(), 22);
    for (float x : k) kh.push_back(Fp32ToFp16(x));
    for (float x : v) vh.push_back(Fp32ToFp16(x));
    for (uint16_t x : kh) kw.push_back(Fp16ToFp32(x));
    for (uint16_t x : vh) vw.push_back(Fp16ToFp32(x));
    q = Random(static_cast<size_t>(n) * heads * hd, 23);
    rope = RopeTable(128, hd);
    for (int i = 0; i < n; ++i) {
      rows.push_back({.prefix_table = 0,
                      .prefix_visible = prefix,
                      .prefix_pos_base = 0,
                      .prefix_pos_stride = 1,
                      .main_table = 1,
                      .main_front = 0,
                      .main_lo = 0,
                      .main_hi = i + 1,
                      .main_pos_lo = prefix});
    }
    shape = {heads, kv_heads, hd, bs, 1.0f / std::sqrt(static_cast<float>(hd))};
  }
  Tensor Cache(bool half, bool key) {
    if (half) return T(key ? kh.data() : vh.data(), DType::kF16, {blocks, kv_heads, bs, hd});
    return T(key ? kw.data() : vw.data(), DType::kF32, {blocks, kv_heads, bs, hd});
  }
  // Rows [row0, row0 + nrows) into the same rows of out, over caches k and v.
  absl::Status Run(Backend& be, Stream& st, Tensor k, Tensor v, std::vector<float>& out, int row0,
                   int nrows) {
    const int q_dim = heads * hd;
    return be.Attention(st, T(q.data() + row0 * q_dim, DType::kF32, {nrows, q_dim}), k, v,
                        T(rows.data() + row0, DType::kI32, {nrows, kAttnRowFields}),
                        T(tables.data(), DType::kI32, {static_cast<int64_t>(tables.size())}),
                        T(rope.data(), DType::kF32, {128, hd}), shape,
                        T(out.data() + row0 * q_dim, DType::kF32, {nrows, q_dim}));
  }
  // The same over the fp16 caches (half) or their widenings.
  absl::Status Run(Backend& be, Stream& st, bool half, std::vector<float>& out, int row0,
                   int nrows) {
    return Run(be, st, Cache(half, true), Cache(half, false), out, row0, nrows);
  }
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// hd 12: the transposed-tile scores; 40: key-row scores with a partial chunk; 64, 80:
// whole chunks (the F32 kernel reads those values in place, the fp16 one from its copy).
// 64, 96, 128: keys rotated 16 lanes at a time straight from the cache (halves of 2, 3, 4
// whole vectors); 12, 40, 80 by RotateHalf.
TEST(F16KvTest, AttentionEqualsF32OnTheWidenedCacheRowByRow) {
  Rig r;
  for (const int hd : {12, 40, 64, 80, 96, 128}) {
    SCOPED_TRACE(hd);
    Case c(6, 3, hd);
    std::vector<float> ref_half(c.q.size()), ref_f32(c.q.size());
    ASSERT_TRUE(c.Run(*r.ref, *r.s1, true, ref_half, 0, c.n).ok());
    ASSERT_TRUE(c.Run(*r.ref, *r.s1, false, ref_f32, 0, c.n).ok());
    EXPECT_TRUE(SameBits(ref_half, ref_f32));
    for (cpu::Isa isa : RunnableIsas()) {
      SCOPED_TRACE(cpu::IsaName(isa));
      IsaScope scope(isa);
      std::vector<float> half(c.q.size()), f32(c.q.size()), single(c.q.size());
      ASSERT_TRUE(c.Run(*r.opt, *r.s2, true, half, 0, c.n).ok());
      ASSERT_TRUE(c.Run(*r.opt, *r.s2, false, f32, 0, c.n).ok());
      for (int i = 0; i < c.n; ++i) ASSERT_TRUE(c.Run(*r.opt, *r.s2, true, single, i, 1).ok());
      EXPECT_TRUE(SameBits(half, f32));
      EXPECT_TRUE(SameBits(half, single));  // decode rows == prefill rows
      for (size_t i = 0; i < half.size(); ++i) ASSERT_NEAR(half[i], ref_half[i], 1e-5) << i;
    }
  }
}

// Decode rows of different sequences (each its own key layout, so a one-row block): where
// head_dim is a multiple of 32, a call of such rows runs tasks over several KV heads that
// read the cache in address order (on the test's 2 threads: all 3 heads per row for 12
// rows, all 6 for 3 rows, two tasks of 3 for one row of 6 KV heads), while a row alone of
// 3 KV heads runs one head per task. Every row gives the same bits either way, F32 and
// fp16 caches alike, with GQA (2 query heads per KV head) and without, and matches the
// reference.
TEST(F16KvTest, DecodeRowsOfManySequencesGiveTheBitsOfEachRowAlone) {
  Rig r;
  for (const int hd : {12, 32, 64, 80, 96, 128, 256}) {
    for (const auto& [kv_heads, n] : {std::pair{3, 12}, std::pair{6, 3}}) {
      SCOPED_TRACE(::testing::Message() << "hd " << hd << " kv_heads " << kv_heads << " n " << n);
      Case c(6, kv_heads, hd);
      c.n = n;
      c.rows.clear();
      for (int i = 0; i < n; ++i) {
        c.rows.push_back({.prefix_table = 0,
                          .prefix_visible = i % 4,
                          .prefix_pos_base = 0,
                          .prefix_pos_stride = 1,
                          .main_table = 1,
                          .main_front = i % 5,
                          .main_lo = i % 3,
                          .main_hi = 20 + 6 * i,
                          .main_pos_lo = 3 + i % 2});
      }
      std::vector<float> ref(c.q.size());
      ASSERT_TRUE(c.Run(*r.ref, *r.s1, true, ref, 0, n).ok());
      for (cpu::Isa isa : RunnableIsas()) {
        SCOPED_TRACE(cpu::IsaName(isa));
        IsaScope scope(isa);
        for (const bool half : {true, false}) {
          SCOPED_TRACE(half ? "fp16" : "f32");
          std::vector<float> batch(c.q.size()), single(c.q.size());
          ASSERT_TRUE(c.Run(*r.opt, *r.s2, half, batch, 0, n).ok());
          for (int i = 0; i < n; ++i) ASSERT_TRUE(c.Run(*r.opt, *r.s2, half, single, i, 1).ok());
          EXPECT_TRUE(SameBits(batch, single));
          for (size_t i = 0; i < static_cast<size_t>(n) * c.heads * hd; ++i) {
            ASSERT_NEAR(batch[i], ref[i], 1e-5) << i;
          }
        }
      }
    }
  }
}

TEST(F16KvTest, KeySlicesGiveTheBitsOfOneCall) {
  Rig r;
  Case c(4, 2, 64);
  const int q_dim = c.heads * c.hd;
  std::vector<float> whole(c.q.size());
  ASSERT_TRUE(c.Run(*r.opt, *r.s2, true, whole, 0, c.n).ok());
  std::vector<float> state(static_cast<size_t>(c.n) * c.heads * (c.hd + 2));
  for (int slice : {16, 32, 48}) {
    SCOPED_TRACE(slice);
    std::vector<float> out(c.q.size(), -1.0f);
    for (int k0 = 0; k0 < c.prefix + c.n; k0 += slice) {
      ASSERT_TRUE(r.opt
                      ->AttentionPart(
                          *r.s2, T(c.q.data(), DType::kF32, {c.n, q_dim}), c.Cache(true, true),
                          c.Cache(true, false),
                          T(c.rows.data(), DType::kI32, {c.n, kAttnRowFields}),
                          T(c.tables.data(), DType::kI32, {static_cast<int64_t>(c.tables.size())}),
                          T(c.rope.data(), DType::kF32, {128, c.hd}), c.shape, k0, k0 + slice,
                          T(state.data(), DType::kF32, {c.n, c.heads * (c.hd + 2)}),
                          T(out.data(), DType::kF32, {c.n, q_dim}))
                      .ok());
    }
    EXPECT_TRUE(SameBits(whole, out));
  }
}

TEST(F16KvTest, MixedCacheTypesAreRefused) {
  Rig r;
  Case c(4, 2, 16);
  std::vector<float> out(c.q.size());
  for (Backend* be : {r.ref.get(), r.opt.get()}) {
    std::unique_ptr<Stream> st = be->CreateStream();
    EXPECT_EQ(c.Run(*be, *st, c.Cache(true, true), c.Cache(false, false), out, 0, c.n).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvfold::kernels
