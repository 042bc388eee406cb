// CPU backend ops: optimised vs reference on odd shapes (tails of every tile), batch
// invariance of each row, attention over paged [prefix | main] vs a direct computation,
// and the launcher's shape/range checks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace kvfold::kernels {
namespace {

using testing::ExpectKeptOrNegated;
using testing::IsaScope;
using testing::Random;
using testing::Rig;
using testing::RopeTable;
using testing::RunnableIsas;
using testing::T;

// One F32 paged Attention call of a test case: rows [row0, row0 + nrows) of its queries
// and AttnRows into the same rows of `out`.
struct PagedAttention {
  std::vector<float>& q;
  std::vector<float>& kc;
  std::vector<float>& vc;
  std::vector<AttnRow>& rows;
  const std::vector<int32_t>& tables;
  std::vector<float>& rope;
  AttentionShape shape;
  int blocks;
  absl::Status Run(Backend& be, Stream& st, std::vector<float>& out, int row0, int nrows) const {
    const int hd = shape.head_dim, bs = shape.block_size;
    const int q_dim = shape.num_heads * hd, kv_heads = shape.num_kv_heads;
    const int64_t rope_rows = static_cast<int64_t>(rope.size()) / hd;
    return be.Attention(
        st, T(q.data() + row0 * q_dim, DType::kF32, {nrows, q_dim}),
        T(kc.data(), DType::kF32, {blocks, kv_heads, bs, hd}),
        T(vc.data(), DType::kF32, {blocks, kv_heads, bs, hd}),
        T(rows.data() + row0, DType::kI32, {nrows, kAttnRowFields}),
        T(const_cast<int32_t*>(tables.data()), DType::kI32, {static_cast<int64_t>(tables.size())}),
        T(rope.data(), DType::kF32, {rope_rows, hd}), shape,
        T(out.data() + row0 * q_dim, DType::kF32, {nrows, q_dim}));
  }
};

class MatMulTest : public ::testing::TestWithParam<std::tuple<int, int, int, DType>> {};

TEST_P(MatMulTest, OptimizedMatchesReferenceAndIsBatchInvariant) {
  const auto [n, m, k, dtype] = GetParam();
  Rig r;
  auto x = Random(static_cast<size_t>(n) * k, 1);
  auto w32 = Random(static_cast<size_t>(m) * k, 2, 0.2f);
  auto bias = Random(m, 3);
  std::vector<uint16_t> w16(w32.size());
  for (size_t i = 0; i < w32.size(); ++i) {
    w16[i] = dtype == DType::kF16 ? Fp32ToFp16(w32[i]) : Fp32ToBf16(w32[i]);
  }
  void* wp = dtype == DType::kF32 ? static_cast<void*>(w32.data()) : static_cast<void*>(w16.data());
  const Tensor w = T(wp, dtype, {m, k}), b = T(bias.data(), DType::kF32, {m});
  std::vector<float> out_ref(static_cast<size_t>(n) * m);
  ASSERT_TRUE(r.ref->MatMul(*r.s1, T(x.data(), DType::kF32, {n, k}), w, b,
                            T(out_ref.data(), DType::kF32, {n, m})).ok());
  for (cpu::Isa isa : RunnableIsas()) {
    SCOPED_TRACE(cpu::IsaName(isa));
    IsaScope scope(isa);
    std::vector<float> out_opt(out_ref.size());
    ASSERT_TRUE(r.opt->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}), w, b,
                              T(out_opt.data(), DType::kF32, {n, m})).ok());
    for (size_t i = 0; i < out_ref.size(); ++i) {
      ASSERT_NEAR(out_opt[i], out_ref[i], 1e-4f * (1.0f + std::abs(out_ref[i]))) << i;
    }
    // Every row alone, and every prefix of rows, gives the same bits as inside the batch.
    for (int row : {0, n / 2, n - 1}) {
      std::vector<float> one(m);
      ASSERT_TRUE(r.opt->MatMul(*r.s2, T(x.data() + static_cast<size_t>(row) * k, DType::kF32, {1, k}), w, b,
                                T(one.data(), DType::kF32, {1, m})).ok());
      EXPECT_EQ(0, std::memcmp(one.data(), out_opt.data() + static_cast<size_t>(row) * m, m * 4));
      std::vector<float> head(static_cast<size_t>(row + 1) * m);
      ASSERT_TRUE(r.opt->MatMul(*r.s2, T(x.data(), DType::kF32, {row + 1, k}), w, b,
                                T(head.data(), DType::kF32, {row + 1, m})).ok());
      EXPECT_EQ(0, std::memcmp(head.data(), out_opt.data(), head.size() * 4));
    }
  }
  // The reference is batch-invariant too.
  for (int row : {0, n - 1}) {
    std::vector<float> one(m);
    ASSERT_TRUE(r.ref->MatMul(*r.s1, T(x.data() + static_cast<size_t>(row) * k, DType::kF32, {1, k}), w, b,
                              T(one.data(), DType::kF32, {1, m})).ok());
    EXPECT_EQ(0, std::memcmp(one.data(), out_ref.data() + static_cast<size_t>(row) * m, m * 4));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulTest,
    ::testing::Values(
        std::make_tuple(1, 769, 75, DType::kF32), std::make_tuple(5, 67, 131, DType::kF32),
        std::make_tuple(17, 130, 64, DType::kBF16), std::make_tuple(9, 257, 200, DType::kF16),
        std::make_tuple(33, 300, 96, DType::kF32), std::make_tuple(2, 3, 7, DType::kBF16),
        std::make_tuple(3, 77, 33, DType::kF16), std::make_tuple(6, 71, 17, DType::kF32),
        std::make_tuple(1, 13, 768, DType::kBF16), std::make_tuple(14, 64, 48, DType::kF32),
        std::make_tuple(12, 40, 768, DType::kF16),
        // F32 panels (m % 16 == 0 on AVX-512): row tails of the 8-row tiles,
        // column tails of the 3- and 4-panel blocks, a long k, a parallel call, rows in
        // several chunks of 128 (a ragged last one).
        std::make_tuple(19, 96, 77, DType::kF32), std::make_tuple(1, 80, 200, DType::kF32),
        std::make_tuple(3, 48, 2048, DType::kF32), std::make_tuple(25, 2064, 33, DType::kF32),
        std::make_tuple(300, 64, 40, DType::kF32)));

// PrepareMatMulWeight lays an adopted F32 weight's panels out at once (on AVX-512, m % 16
// == 0): weights changed in the adopted buffer afterwards (a probe; adopted weights are
// read-only by contract) do not reach MatMul, while a weight adopted without the call gets
// its panels from its first MatMul, after the change. Kept panels and a call's own give
// the same bits.
TEST(MatMulF32PanelsTest, PanelsAreLaidOutByPrepareAndKeptBesideTheWeight) {
  const int n = 5, m = 48, k = 40;
  if (cpu::CpuBestIsa() != cpu::Isa::kAvx512)
    GTEST_SKIP() << "no F32 panel path on this CPU (AVX-512)";
  IsaScope scope(cpu::Isa::kAvx512);
  ASSERT_EQ(cpu::MatMulPanels({nullptr, nullptr, DType::kF32, nullptr, nullptr, 1, m, k}),
            cpu::PanelKind::kF32);
  Rig r;
  auto x = Random(static_cast<size_t>(n) * k, 41);
  auto w = Random(static_cast<size_t>(m) * k, 42, 0.2f);
  std::vector<float> before(static_cast<size_t>(n) * m);
  ASSERT_TRUE(r.opt
                  ->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}),
                           T(w.data(), DType::kF32, {m, k}), Tensor(),
                           T(before.data(), DType::kF32, {n, m}))
                  .ok());
  for (bool prepare : {true, false}) {
    SCOPED_TRACE(prepare ? "prepared" : "not prepared");
    auto adopted = r.opt->AdoptWeights(w.data(), w.size() * sizeof(float), nullptr);
    ASSERT_TRUE(adopted.ok()) << adopted.status();
    const Tensor wa = T((*adopted)->data(), DType::kF32, {m, k});
    if (prepare) {
      ASSERT_TRUE(r.opt->PrepareMatMulWeight(wa).ok());
    }
    float* values = static_cast<float*>((*adopted)->data());
    const bool copied = values != w.data();
    for (int i = 0; i < m * k; ++i) values[i] = -values[i];
    ExpectKeptOrNegated(r, x, wa, n, m, k, before, prepare);
    if (!copied) {
      for (int i = 0; i < m * k; ++i) values[i] = -values[i];
    }
  }
}

// Direct attention for one row: keys given as (pointer to un-rotated k, v, position).
TEST(AttentionTest, PagedGqaMatchesDirectAndBackendsAgree) {
  Rig r;
  const int heads = 6, kv_heads = 2, hd = 12, bs = 5, blocks = 12;
  const int kv_dim = kv_heads * hd, q_dim = heads * hd;
  const int rope_rows = 64;
  std::vector<float> rope = RopeTable(rope_rows, hd);
  auto kc = Random(static_cast<size_t>(blocks) * bs * kv_dim, 4);
  auto vc = Random(kc.size(), 5);
  // Prefix: blocks {7}, 3 entries at positions 0 (memory-like, stride 0). Main: blocks
  // {2, 9, 4}, front 3, entries [0, 11); rows see main [lo, hi).
  const std::vector<int32_t> tables = {7, 2, 9, 4};
  struct RowSpec { int prefix, lo, hi, pos_lo; };
  const std::vector<RowSpec> specs = {{3, 0, 1, 1}, {3, 2, 9, 1}, {0, 4, 11, 0}, {2, 10, 11, 7}};
  const int n = static_cast<int>(specs.size());
  std::vector<AttnRow> rows(n);
  for (int i = 0; i < n; ++i) {
    rows[i] = {.prefix_table = 0,
               .prefix_visible = specs[i].prefix,
               .prefix_pos_base = 0,
               .prefix_pos_stride = 0,
               .main_table = 1,
               .main_front = 3,
               .main_lo = specs[i].lo,
               .main_hi = specs[i].hi,
               .main_pos_lo = specs[i].pos_lo};
  }
  auto q = Random(static_cast<size_t>(n) * q_dim, 6);
  AttentionShape shape{heads, kv_heads, hd, bs, 1.0f / std::sqrt(12.0f)};
  std::vector<float> out_ref(q.size()), out_opt(q.size());
  const PagedAttention call{q, kc, vc, rows, tables, rope, shape, blocks};
  ASSERT_TRUE(call.Run(*r.ref, *r.s1, out_ref, 0, n).ok());
  ASSERT_TRUE(call.Run(*r.opt, *r.s2, out_opt, 0, n).ok());
  for (int i = 0; i < n; ++i) {
    const RowSpec& sp = specs[i];
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / (heads / kv_heads);
      // (float offset of the entry's head kvh, position): blocks are [kv_heads, bs, hd]
      std::vector<std::pair<int64_t, int>> keys;
      auto head_at = [&](int64_t slot) { return FloatKvIndex(slot, kvh, 0, shape); };
      for (int j = 0; j < sp.prefix; ++j) keys.push_back({head_at(7LL * bs + j), 0});
      for (int j = sp.lo; j < sp.hi; ++j) {
        const int slot = 3 + j;
        keys.push_back({head_at(static_cast<int64_t>(tables[1 + slot / bs]) * bs + slot % bs),
                        sp.pos_lo + j - sp.lo});
      }
      std::vector<double> s;
      for (auto [off, pos] : keys) {
        double dot = 0;
        for (int t = 0; t < hd / 2; ++t) {
          const double c = rope[pos * hd + t], sn = rope[pos * hd + hd / 2 + t];
          const double a = kc[off + t], b = kc[off + hd / 2 + t];
          dot += q[i * q_dim + h * hd + t] * (a * c - b * sn) +
                 q[i * q_dim + h * hd + hd / 2 + t] * (b * c + a * sn);
        }
        s.push_back(dot * shape.scale);
      }
      double mx = -1e300, sum = 0;
      for (double x : s) mx = std::max(mx, x);
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int t = 0; t < hd; ++t) {
        double o = 0;
        for (size_t j = 0; j < keys.size(); ++j) o += s[j] / sum * vc[keys[j].first + t];
        EXPECT_NEAR(out_ref[i * q_dim + h * hd + t], o, 1e-5);
        EXPECT_NEAR(out_opt[i * q_dim + h * hd + t], o, 1e-5);
      }
    }
  }
  // Row 2 alone: same bits on each backend.
  std::vector<float> alone_ref(q.size()), alone_opt(q.size());
  ASSERT_TRUE(call.Run(*r.ref, *r.s1, alone_ref, 2, 1).ok());
  ASSERT_TRUE(call.Run(*r.opt, *r.s2, alone_opt, 2, 1).ok());
  EXPECT_EQ(0, std::memcmp(&alone_ref[2 * q_dim], &out_ref[2 * q_dim], q_dim * 4));
  EXPECT_EQ(0, std::memcmp(&alone_opt[2 * q_dim], &out_opt[2 * q_dim], q_dim * 4));
}

// Causal rows over several key tiles (70 keys > 4 tiles of 16), a 3-entry prefix and a
// shuffled block table: the tiled kernel agrees with the reference, each row alone
// (decode) gives the bits it has inside the batch (prefill), and every ISA path gives the
// same bits.
TEST(AttentionTest, TiledCausalRowsMatchReferenceAcrossBatchesAndIsas) {
  Rig r;
  // hd 12: scores by the transposed tile (one lane per key); 40, 64, 80: scores by key rows
  // (16-lane chunks, then SumLanes), 40 with a chunk of 8 (values copied into padded
  // rows); 64 and 80: values read in place from the cache, in one pass of four 16-lane
  // chunks, and in a pass of four and one of one.
  // 96 and 128: keys rotated 16 lanes at a time (RotatePiece), like 64.
  for (const int hd : {12, 40, 64, 80, 96, 128}) {
    SCOPED_TRACE(hd);
    const int heads = 6, kv_heads = 3, bs = 16, blocks = 8, main_keys = 70, prefix = 3;
    const int kv_dim = kv_heads * hd, q_dim = heads * hd, rope_rows = 128;
    std::vector<float> rope = RopeTable(rope_rows, hd);
    auto kc = Random(static_cast<size_t>(blocks) * bs * kv_dim, 21);
    auto vc = Random(kc.size(), 22);
    const std::vector<int32_t> tables = {6, 3, 0, 7, 1, 5, 2};  // prefix: {6}; main: the rest
    const int n = main_keys;
    std::vector<AttnRow> rows(n);
    for (int i = 0; i < n; ++i) {
      rows[i] = {.prefix_table = 0,
                 .prefix_visible = prefix,
                 .prefix_pos_base = 0,
                 .prefix_pos_stride = 1,
                 .main_table = 1,
                 .main_front = 0,
                 .main_lo = 0,
                 .main_hi = i + 1,
                 .main_pos_lo = prefix};
    }
    auto q = Random(static_cast<size_t>(n) * q_dim, 23);
    AttentionShape shape{heads, kv_heads, hd, bs, 1.0f / std::sqrt(static_cast<float>(hd))};
    const PagedAttention call{q, kc, vc, rows, tables, rope, shape, blocks};
    std::vector<float> out_ref(q.size());
    ASSERT_TRUE(call.Run(*r.ref, *r.s1, out_ref, 0, n).ok());
    std::vector<float> first;
    for (cpu::Isa isa : RunnableIsas()) {
      SCOPED_TRACE(cpu::IsaName(isa));
      IsaScope scope(isa);
      std::vector<float> batch(q.size()), single(q.size());
      ASSERT_TRUE(call.Run(*r.opt, *r.s2, batch, 0, n).ok());
      for (int i = 0; i < n; ++i) ASSERT_TRUE(call.Run(*r.opt, *r.s2, single, i, 1).ok());
      for (size_t i = 0; i < batch.size(); ++i) ASSERT_NEAR(batch[i], out_ref[i], 1e-5) << i;
      EXPECT_EQ(0, std::memcmp(batch.data(), single.data(), batch.size() * 4));
      if (first.empty()) first = batch;
      EXPECT_EQ(0, std::memcmp(batch.data(), first.data(), batch.size() * 4));
    }
  }
}

// The tiled kernel's loaders rotate keys of head_dim % 32 == 0 by RotatePiece, 16 lanes
// of each half at a time (RotateVectors: the F32 loader's loop): the bits of RotateHalf,
// which the references use.
TEST(AttentionTest, VectorRotationEqualsRotateHalf) {
  for (const int hd : {32, 64, 96, 128, 256}) {
    SCOPED_TRACE(hd);
    ASSERT_TRUE(cpu::tiled::VectorRotation(hd));
    const std::vector<float> rope = RopeTable(300, hd);
    const std::vector<float> x = Random(static_cast<size_t>(hd), 41, 4.0f);
    std::vector<float> want(hd), got(hd);
    for (const int pos : {0, 1, 17, 299}) {
      const float* cs = rope.data() + static_cast<size_t>(pos) * hd;
      cpu::RotateHalf(x.data(), cs, hd, want.data());
      std::fill(got.begin(), got.end(), 0.0f);
      cpu::tiled::RotateVectors(x.data(), cs, hd, got.data());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), hd * sizeof(float))) << pos;
    }
  }
  for (const int hd : {2, 12, 40, 80}) EXPECT_FALSE(cpu::tiled::VectorRotation(hd)) << hd;
}

// Resumable attention: slices of the keys, run one after another with the softmax state
// carried between them, give the bits of one call (engine/prefill_cursor.h relies on it).
TEST(AttentionTest, KeySlicesGiveTheBitsOfOneCall) {
  Rig r;
  const int heads = 4, kv_heads = 2, hd = 8, bs = 16, blocks = 12, prefix = 5, n = 40;
  const int kv_dim = kv_heads * hd, q_dim = heads * hd, rope_rows = 256;
  std::vector<float> rope = RopeTable(rope_rows, hd);
  auto kc = Random(static_cast<size_t>(blocks) * bs * kv_dim, 31, 2.0f);
  auto vc = Random(kc.size(), 32);
  const std::vector<int32_t> tables = {11, 4, 9, 0, 7, 2, 10, 5, 1, 8, 3, 6};
  std::vector<AttnRow> rows(n);
  for (int i = 0; i < n; ++i) {  // rows 100..139 of a sequence, causal
    rows[i] = {.prefix_table = 0, .prefix_visible = prefix, .prefix_pos_base = 0,
               .prefix_pos_stride = 1, .main_table = 1, .main_front = 3, .main_lo = 0,
               .main_hi = 100 + i + 1, .main_pos_lo = prefix};
  }
  auto q = Random(static_cast<size_t>(n) * q_dim, 33, 3.0f);
  AttentionShape shape{heads, kv_heads, hd, bs, 1.0f / std::sqrt(8.0f)};
  Tensor qt = T(q.data(), DType::kF32, {n, q_dim});
  Tensor kt = T(kc.data(), DType::kF32, {blocks, kv_heads, bs, hd});
  Tensor vt = T(vc.data(), DType::kF32, {blocks, kv_heads, bs, hd});
  Tensor rt = T(rows.data(), DType::kI32, {n, kAttnRowFields});
  Tensor tt = T(const_cast<int32_t*>(tables.data()), DType::kI32, {12});
  Tensor ropet = T(rope.data(), DType::kF32, {rope_rows, hd});
  std::vector<float> state(static_cast<size_t>(n) * heads * (hd + 2));
  Tensor st = T(state.data(), DType::kF32, {n, heads * (hd + 2)});
  for (cpu::Isa isa : RunnableIsas()) {
    SCOPED_TRACE(cpu::IsaName(isa));
    IsaScope scope(isa);
    std::vector<float> whole(q.size());
    ASSERT_TRUE(r.opt->Attention(*r.s2, qt, kt, vt, rt, tt, ropet, shape,
                                 T(whole.data(), DType::kF32, {n, q_dim}))
                    .ok());
    for (int slice : {16, 48, 96, 512}) {
      SCOPED_TRACE(slice);
      std::vector<float> out(q.size(), -1.0f);
      Tensor ot = T(out.data(), DType::kF32, {n, q_dim});
      for (int k0 = 0; k0 < prefix + 100 + n; k0 += slice) {
        ASSERT_TRUE(
            r.opt->AttentionPart(*r.s2, qt, kt, vt, rt, tt, ropet, shape, k0, k0 + slice, st, ot)
                .ok());
      }
      EXPECT_EQ(0, std::memcmp(whole.data(), out.data(), whole.size() * sizeof(float)));
    }
  }
  std::vector<float> out(q.size());
  Tensor ot = T(out.data(), DType::kF32, {n, q_dim});
  EXPECT_EQ(absl::StatusCode::kInvalidArgument,
            r.opt->AttentionPart(*r.s2, qt, kt, vt, rt, tt, ropet, shape, 8, 32, st, ot).code());
  EXPECT_EQ(absl::StatusCode::kInvalidArgument,
            r.opt->AttentionPart(*r.s2, qt, kt, vt, rt, tt, ropet, shape, 0, 32,
                                 T(state.data(), DType::kF32, {n, heads}), ot)
                .code());
  EXPECT_EQ(absl::StatusCode::kUnimplemented,
            r.ref->AttentionPart(*r.s1, qt, kt, vt, rt, tt, ropet, shape, 0, 32, st, ot).code());
  // Caches not laid out [blocks, kv_heads, block_size, head_dim] for the shape: the entries'
  // rows of the old layout ([blocks, block_size, kv_dim]), heads and head_dim swapped (the
  // same kv_dim), half the block size, K and V of different shapes.
  const Tensor rows_layout = T(kc.data(), DType::kF32, {blocks, bs, kv_dim});
  const Tensor swapped = T(kc.data(), DType::kF32, {blocks, hd, bs, kv_heads});
  const Tensor half_k = T(kc.data(), DType::kF32, {blocks * 2, kv_heads, bs / 2, hd});
  const Tensor half_v = T(vc.data(), DType::kF32, {blocks * 2, kv_heads, bs / 2, hd});
  for (Backend* be : {r.ref.get(), r.opt.get()}) {
    SCOPED_TRACE(be->Name());
    std::unique_ptr<Stream> s = be->CreateStream();
    for (const auto& [k, v] : {std::pair{rows_layout, rows_layout}, std::pair{swapped, swapped},
                               std::pair{half_k, half_v}, std::pair{kt, half_v}}) {
      EXPECT_EQ(absl::StatusCode::kInvalidArgument,
                be->Attention(*s, qt, k, v, rt, tt, ropet, shape, ot).code());
    }
  }
  EXPECT_EQ(absl::StatusCode::kInvalidArgument,
            r.opt->AttentionPart(*r.s2, qt, swapped, swapped, rt, tt, ropet, shape, 0, 32, st, ot)
                .code());
}

TEST(OpsTest, RmsNormRopeSiluGatherAndChecks) {
  Rig r;
  Backend& be = *r.opt;
  Stream& st = *r.s2;
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 0, 1}, w = {1, 0.5f, 2, 1}, out(8);
  ASSERT_TRUE(be.RmsNorm(st, T(x.data(), DType::kF32, {2, 4}), T(w.data(), DType::kF32, {4}), 0.0f,
                         T(out.data(), DType::kF32, {2, 4})).ok());
  const float inv = 1.0f / std::sqrt(30.0f / 4);
  EXPECT_NEAR(out[1], 2 * inv * 0.5f, 1e-6);
  EXPECT_NEAR(out[4], -1 / std::sqrt(0.5f), 1e-6);
  // RoPE by position 1 with one frequency pair: a 2-d rotation.
  std::vector<float> table = {1, 0, std::cos(0.5f), std::sin(0.5f)};  // [2 rows, head_dim 2]
  std::vector<float> v = {1, 0}, rotated(2);
  std::vector<int32_t> pos = {1};
  ASSERT_TRUE(be.Rope(st, T(v.data(), DType::kF32, {1, 1, 2}), T(pos.data(), DType::kI32, {1}),
                      T(table.data(), DType::kF32, {2, 2}), T(rotated.data(), DType::kF32, {1, 1, 2})).ok());
  EXPECT_NEAR(rotated[0], std::cos(0.5f), 1e-6);
  EXPECT_NEAR(rotated[1], std::sin(0.5f), 1e-6);
  pos[0] = 2;
  EXPECT_EQ(be.Rope(st, T(v.data(), DType::kF32, {1, 1, 2}), T(pos.data(), DType::kI32, {1}),
                    T(table.data(), DType::kF32, {2, 2}), T(rotated.data(), DType::kF32, {1, 1, 2})).code(),
            absl::StatusCode::kOutOfRange);
  std::vector<float> g = {0, 1, -2}, u = {1, 2, 3}, o(3);
  ASSERT_TRUE(be.SiluMul(st, T(g.data(), DType::kF32, {3}), T(u.data(), DType::kF32, {3}),
                         T(o.data(), DType::kF32, {3})).ok());
  EXPECT_NEAR(o[1], 2 / (1 + std::exp(-1.0f)), 1e-6);
  std::vector<uint16_t> table16 = {Fp32ToBf16(1.5f), Fp32ToBf16(-2.0f), Fp32ToBf16(3.0f), Fp32ToBf16(0.25f)};
  std::vector<int32_t> ids = {1, 0}, bad = {2};
  std::vector<float> gathered(4);
  ASSERT_TRUE(be.Gather(st, T(table16.data(), DType::kBF16, {2, 2}), T(ids.data(), DType::kI32, {2}),
                        T(gathered.data(), DType::kF32, {2, 2})).ok());
  EXPECT_EQ(gathered, (std::vector<float>{3.0f, 0.25f, 1.5f, -2.0f}));
  EXPECT_EQ(be.Gather(st, T(table16.data(), DType::kBF16, {2, 2}), T(bad.data(), DType::kI32, {1}),
                      T(gathered.data(), DType::kF32, {1, 2})).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(be.MatMul(st, T(x.data(), DType::kF32, {2, 4}), T(w.data(), DType::kF32, {1, 3}), Tensor(),
                      T(out.data(), DType::kF32, {2, 1})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateBackend("tpu", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CreateBackend("cpu-ref", 1).ok());
}

}  // namespace
}  // namespace kvfold::kernels
