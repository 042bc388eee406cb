// The Q8 matmul (cpu_ops.h): the reference against the definition, every ISA path against
// the reference, batch invariance, the panel paths (AMX, VNNI panels) against their exact
// block-dot definition, adopted weights' panels, the activation quantizer, and products of
// one x in one call (Backend::MatMuls) against each product's MatMul.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/quant/weight_q8.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace kvfold::kernels {
namespace {

using testing::ExpectKeptOrNegated;
using testing::IsaScope;
using testing::Random;
using testing::Rig;
using testing::RunnableIsas;
using testing::T;

// Turns the AMX Q8 path on or off (isa.h) for the scope.
class AmxScope {
 public:
  explicit AmxScope(bool enabled) { cpu::SetAmxForTesting(enabled); }
  ~AmxScope() { cpu::SetAmxForTesting(true); }
};

// The panel paths' numerics (matmul_tiles.h): per output, block by block,
// acc = fma(float(exact integer dot), w_scale * x_scale, acc), from 0; out = acc.
std::vector<float> BlockDotDefinition(const std::vector<float>& x, const std::vector<uint8_t>& wq,
                                      int n, int m, int k) {
  cpu::Q8Activations xq;
  cpu::QuantizeActivationsQ8(nullptr, x.data(), n, k, cpu::Q8Offsets::kNone, xq);
  const int blocks = (k + 31) / 32;
  const size_t row_bytes = Q8RowBytes(k);
  std::vector<float> out(static_cast<size_t>(n) * m);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < m; ++j) {
      const uint8_t* row = wq.data() + j * row_bytes;
      const int8_t* wc = reinterpret_cast<const int8_t*>(row + blocks * 2);
      float acc = 0.0f;
      for (int b = 0; b < blocks; ++b) {
        int32_t dot = 0;
        for (int t = 32 * b; t < 32 * b + 32; ++t)
          dot += int32_t{xq.codes[i * xq.padded_k + t]} * wc[t];
        uint16_t h;
        std::memcpy(&h, row + 2 * b, 2);
        const float scale = Fp16ToFp32(h) * xq.scales[i * (xq.padded_k / 32) + b];
        acc = std::fma(static_cast<float>(dot), scale, acc);
      }
      out[static_cast<size_t>(i) * m + j] = acc;
    }
  }
  return out;
}

// Q8 weights multiply int8 activations (cpu_ops.h Q8Activations): the reference against
// the definition (per block: x quantized by scale amax / 127, exact integer dot, times
// both scales) and against the F32 product within the activation rounding; every ISA
// path against the reference; rows alone and in batches bit-identical; portable and AVX2
// bit-identical; Gather dequantizing exactly like DequantizeRowQ8.
class MatMulQ8Test : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(MatMulQ8Test, OptimizedMatchesReferenceAndIsBatchInvariant) {
  const auto [n, m, k] = GetParam();
  Rig r;
  auto x = Random(static_cast<size_t>(n) * k, 11);
  if (k > 40) std::fill(x.begin() + 32, x.begin() + 40, 0.0f);  // a block with zeros
  auto w32 = Random(static_cast<size_t>(m) * k, 12, 0.2f);
  const size_t row_bytes = Q8RowBytes(k);
  std::vector<uint8_t> wq(m * row_bytes);
  for (int j = 0; j < m; ++j)
    quant::QuantizeRowQ8(w32.data() + static_cast<size_t>(j) * k, k, wq.data() + j * row_bytes);
  const Tensor w = T(wq.data(), DType::kQ8, {m, k});
  ASSERT_EQ(w.size_bytes(), wq.size());
  std::vector<float> out_ref(static_cast<size_t>(n) * m);
  ASSERT_TRUE(r.ref
                  ->MatMul(*r.s1, T(x.data(), DType::kF32, {n, k}), w, Tensor(),
                           T(out_ref.data(), DType::kF32, {n, m}))
                  .ok());
  std::vector<float> deq(static_cast<size_t>(m) * k);
  for (int j = 0; j < m; ++j)
    quant::DequantizeRowQ8(wq.data() + j * row_bytes, k, deq.data() + static_cast<size_t>(j) * k);
  // The definition, in double: x's blocks quantized here, independently of the kernels.
  std::vector<double> xd(x.size());
  for (int i = 0; i < n; ++i) {
    for (int t0 = 0; t0 < k; t0 += 32) {
      float amax = 0.0f;
      for (int t = t0; t < std::min(k, t0 + 32); ++t) amax = std::max(amax, std::abs(x[i * k + t]));
      const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
      for (int t = t0; t < std::min(k, t0 + 32); ++t) {
        const float q = std::nearbyint(x[i * k + t] * id);
        ASSERT_LE(std::abs(q), 127.0f);
        xd[i * k + t] = double{q} * d;
      }
    }
  }
  std::vector<double> mag(out_ref.size());  // sum of |x| |w|: the scale of float rounding
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < m; ++j) {
      double want = 0, exact = 0, rounding = 0, sum_abs = 0;
      for (int t = 0; t < k; ++t) {
        const double wv = deq[static_cast<size_t>(j) * k + t];
        want += xd[i * k + t] * wv;
        exact += double{x[i * k + t]} * wv;
        rounding += std::abs(wv) * std::abs(xd[i * k + t] - x[i * k + t]);
        sum_abs += std::abs(xd[i * k + t] * wv);
      }
      mag[i * m + j] = sum_abs;
      const float got = out_ref[i * m + j];
      ASSERT_NEAR(got, want, 1e-6 * (1.0 + sum_abs)) << i << "," << j;
      ASSERT_NEAR(got, exact, rounding + 1e-6 * (1.0 + sum_abs)) << i << "," << j;
    }
  }
  std::vector<std::vector<float>> by_isa;
  std::vector<cpu::PanelKind> kinds;  // the panels each path read
  const std::vector<float> block_dots = BlockDotDefinition(x, wq, n, m, k);
  // Every ISA path with AMX off, then the AVX-512 path with AMX tiles where the CPU has them.
  std::vector<std::pair<cpu::Isa, bool>> paths;
  for (cpu::Isa isa : RunnableIsas()) paths.emplace_back(isa, false);
  if (cpu::CpuHasAmxInt8()) paths.emplace_back(cpu::Isa::kAvx512, true);
  for (const auto& [isa, amx] : paths) {
    SCOPED_TRACE(std::string(cpu::IsaName(isa)) + (amx ? " amx" : ""));
    IsaScope scope(isa);
    AmxScope amx_scope(amx);
    kinds.push_back(
        cpu::MatMulPanels({x.data(), wq.data(), DType::kQ8, nullptr, nullptr, n, m, k}));
    std::vector<float> out_opt(out_ref.size());
    ASSERT_TRUE(r.opt
                    ->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}), w, Tensor(),
                             T(out_opt.data(), DType::kF32, {n, m}))
                    .ok());
    if (kinds.back() != cpu::PanelKind::kNone) {  // AMX and VNNI panels: the same bits
      EXPECT_EQ(0, std::memcmp(out_opt.data(), block_dots.data(), out_ref.size() * 4));
      auto bias = Random(m, 13);
      std::vector<float> with_bias(out_ref.size());
      ASSERT_TRUE(r.opt
                      ->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}), w,
                               T(bias.data(), DType::kF32, {m}),
                               T(with_bias.data(), DType::kF32, {n, m}))
                      .ok());
      for (size_t i = 0; i < out_ref.size(); ++i)
        ASSERT_EQ(with_bias[i], block_dots[i] + bias[i % m]) << i;
    }
    for (size_t i = 0; i < out_ref.size(); ++i) {
      ASSERT_NEAR(out_opt[i], out_ref[i], 1e-6 * (1.0 + mag[i])) << i;
    }
    for (int row : {0, n / 2, n - 1}) {
      std::vector<float> one(m);
      ASSERT_TRUE(r.opt
                      ->MatMul(*r.s2,
                               T(x.data() + static_cast<size_t>(row) * k, DType::kF32, {1, k}), w,
                               Tensor(), T(one.data(), DType::kF32, {1, m}))
                      .ok());
      EXPECT_EQ(0, std::memcmp(one.data(), out_opt.data() + static_cast<size_t>(row) * m, m * 4));
      std::vector<float> head(static_cast<size_t>(row + 1) * m);
      ASSERT_TRUE(r.opt
                      ->MatMul(*r.s2, T(x.data(), DType::kF32, {row + 1, k}), w, Tensor(),
                               T(head.data(), DType::kF32, {row + 1, m}))
                      .ok());
      EXPECT_EQ(0, std::memcmp(head.data(), out_opt.data(), head.size() * 4));
    }
    by_isa.push_back(std::move(out_opt));
  }
  if (by_isa.size() > 1) {  // portable and AVX2 sum the same lanes in the same order
    EXPECT_EQ(0, std::memcmp(by_isa[0].data(), by_isa[1].data(), out_ref.size() * 4));
  }
  // Adopted weights: the panel paths read the panels the backend keeps beside the buffer
  // (batches and single rows), with the bits of the same weights not adopted (laid out per
  // call). The weights are adopted from an unaligned copy, so the backend copies them; the
  // second round's buffer, adopted after the first is dropped, often gets the same address
  // and must get its own panels (its codes are the first round's negated).
  for (size_t p = 0; p < paths.size(); ++p) {
    if (kinds[p] == cpu::PanelKind::kNone) continue;
    SCOPED_TRACE(kinds[p] == cpu::PanelKind::kAmx ? "adopted, amx" : "adopted, vnni panels");
    IsaScope scope(paths[p].first);
    AmxScope amx_scope(paths[p].second);
    std::vector<uint8_t> host(wq.size() + 4);
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(round);
      std::vector<uint8_t> wr = wq;
      if (round == 1) {
        const int64_t blocks = (k + 31) / 32;
        for (int j = 0; j < m; ++j) {
          for (size_t c = blocks * 2; c < row_bytes; ++c) {
            wr[j * row_bytes + c] =
                static_cast<uint8_t>(-static_cast<int8_t>(wr[j * row_bytes + c]));
          }
        }
      }
      std::memcpy(host.data() + 4, wr.data(), wr.size());
      auto adopted = r.opt->AdoptWeights(host.data() + 4, wr.size(), nullptr);
      ASSERT_TRUE(adopted.ok()) << adopted.status();
      const Tensor wa = T((*adopted)->data(), DType::kQ8, {m, k});
      std::vector<float> plain(out_ref.size()), kept(out_ref.size());
      ASSERT_TRUE(r.opt
                      ->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}),
                               T(wr.data(), DType::kQ8, {m, k}), Tensor(),
                               T(plain.data(), DType::kF32, {n, m}))
                      .ok());
      for (int pass = 0; pass < 2; ++pass) {  // lays the panels out, then reuses them
        ASSERT_TRUE(r.opt
                        ->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}), wa, Tensor(),
                                 T(kept.data(), DType::kF32, {n, m}))
                        .ok());
        EXPECT_EQ(0, std::memcmp(kept.data(), plain.data(), kept.size() * 4));
      }
      for (int row : {0, n - 1}) {  // a single row reads the panels too
        std::vector<float> one(m);
        ASSERT_TRUE(r.opt
                        ->MatMul(*r.s2,
                                 T(x.data() + static_cast<size_t>(row) * k, DType::kF32, {1, k}),
                                 wa, Tensor(), T(one.data(), DType::kF32, {1, m}))
                        .ok());
        EXPECT_EQ(0, std::memcmp(one.data(), kept.data() + static_cast<size_t>(row) * m, m * 4));
      }
      if (round == 0) {
        EXPECT_EQ(0, std::memcmp(kept.data(), by_isa[p].data(), kept.size() * 4));
      } else {
        EXPECT_EQ(kept[0], -by_isa[p][0]);  // negated codes: exactly negated sums
      }
    }
  }
  std::vector<int32_t> ids = {m - 1, 0, m / 2};
  std::vector<float> rows(3 * static_cast<size_t>(k));
  ASSERT_TRUE(
      r.opt->Gather(*r.s2, w, T(ids.data(), DType::kI32, {3}), T(rows.data(), DType::kF32, {3, k}))
          .ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(0, std::memcmp(rows.data() + static_cast<size_t>(i) * k,
                             deq.data() + static_cast<size_t>(ids[i]) * k, k * 4));
  }
}

// PrepareMatMulWeight lays an adopted Q8 weight's panels out at once: codes changed in the
// adopted buffer afterwards (a probe; adopted weights are read-only by contract) do not
// reach MatMul, which reads the panels laid out before the change, while a weight adopted
// without the call gets its panels from its first MatMul, after the change. A weight
// MatMul would reject is refused with InvalidArgument (by both); weights not adopted and
// the reference backend accept the call and do nothing (F32 panels: cpu_backend_test.cc).
TEST(MatMulQ8PrepareTest, PanelsAreLaidOutByTheCallNotByTheFirstMatMul) {
  const int n = 3, m = 32, k = 96;
  if (cpu::MatMulPanels({nullptr, nullptr, DType::kQ8, nullptr, nullptr, 1, m, k}) ==
      cpu::PanelKind::kNone) {
    GTEST_SKIP() << "no Q8 panel path on this CPU (AVX-512 VNNI or AMX)";
  }
  Rig r;
  auto x = Random(static_cast<size_t>(n) * k, 31);
  auto w32 = Random(static_cast<size_t>(m) * k, 32, 0.2f);
  const size_t row_bytes = Q8RowBytes(k);
  std::vector<uint8_t> wq(m * row_bytes);
  for (int j = 0; j < m; ++j)
    quant::QuantizeRowQ8(w32.data() + static_cast<size_t>(j) * k, k, wq.data() + j * row_bytes);
  std::vector<float> before(static_cast<size_t>(n) * m), after(before.size());
  ASSERT_TRUE(r.opt
                  ->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}),
                           T(wq.data(), DType::kQ8, {m, k}), Tensor(),
                           T(before.data(), DType::kF32, {n, m}))
                  .ok());
  const int64_t blocks = (k + 31) / 32;
  for (bool prepare : {true, false}) {
    SCOPED_TRACE(prepare ? "prepared" : "not prepared");
    std::vector<uint8_t> host(wq.size() + 4);  // unaligned: the backend adopts a copy
    std::memcpy(host.data() + 4, wq.data(), wq.size());
    auto adopted = r.opt->AdoptWeights(host.data() + 4, wq.size(), nullptr);
    ASSERT_TRUE(adopted.ok()) << adopted.status();
    const Tensor wa = T((*adopted)->data(), DType::kQ8, {m, k});
    if (prepare) {
      ASSERT_TRUE(r.opt->PrepareMatMulWeight(wa).ok());
    }
    uint8_t* codes = static_cast<uint8_t*>((*adopted)->data());
    for (int j = 0; j < m; ++j) {
      for (size_t c = blocks * 2; c < row_bytes; ++c) {
        codes[j * row_bytes + c] =
            static_cast<uint8_t>(-static_cast<int8_t>(codes[j * row_bytes + c]));
      }
    }
    ExpectKeptOrNegated(r, x, wa, n, m, k, before, prepare);
  }
  std::vector<float> f(static_cast<size_t>(m) * k);
  EXPECT_TRUE(r.opt->PrepareMatMulWeight(T(f.data(), DType::kF32, {m, k})).ok());
  EXPECT_TRUE(r.ref->PrepareMatMulWeight(T(wq.data(), DType::kQ8, {m, k})).ok());
  EXPECT_EQ(r.opt->PrepareMatMulWeight(T(wq.data(), DType::kQ8, {m * k})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.opt->PrepareMatMulWeight(T(f.data(), DType::kI32, {m, k})).code(),
            absl::StatusCode::kInvalidArgument);
  // A weight without rows: refused by both (MatMul once divided by its row count).
  EXPECT_EQ(r.opt->PrepareMatMulWeight(T(wq.data(), DType::kQ8, {0, k})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.opt
                ->MatMul(*r.s2, T(x.data(), DType::kF32, {n, k}), T(f.data(), DType::kF32, {0, k}),
                         Tensor(), T(after.data(), DType::kF32, {n, 0}))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The activation quantizer writes the same codes, scales and offsets on every path,
// including partial blocks, zero blocks, infinities and NaN.
// Rows of 4 whole blocks and of 19 (the AVX-512 path takes a row's whole blocks 16 at a
// time: one full group and a partial one), each with a partial block after them.
TEST(Q8ActivationsTest, EveryPathQuantizesIdentically) {
  for (const int k : {133, 613}) {
    SCOPED_TRACE(k);
    const int n = 3;
    const int padded = (k + 63) / 64 * 64, blocks = padded / 32;
    auto x = Random(static_cast<size_t>(n) * k, 21, 3.0f);
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
    x[70] = std::numeric_limits<float>::infinity();
    x[100] = std::nanf("");
    x[k + 5] = -1e30f;
    // k = 613 only: a NaN in the last row's second group of 16 blocks (a row of k = 133
    // has no such group, and the index would fall past the end of x).
    if (k > 17 * 32 + 3) x[2 * k + 17 * 32 + 3] = std::nanf("");
    cpu::ThreadPool pool(2);
    std::vector<cpu::Q8Activations> got;
    for (cpu::Isa isa : RunnableIsas()) {
      IsaScope scope(isa);
      got.emplace_back();
      cpu::QuantizeActivationsQ8(
          &pool, x.data(), n, k,
          cpu::CpuHasAvx512Vnni() ? cpu::Q8Offsets::kLanes : cpu::Q8Offsets::kNone, got.back());
      cpu::Q8Activations blocks_only;
      cpu::QuantizeActivationsQ8(&pool, x.data(), n, k, cpu::Q8Offsets::kBlocks, blocks_only);
      EXPECT_EQ(0, std::memcmp(blocks_only.codes.data(), got.back().codes.data(), n * padded));
      for (int i = 0; i < n; ++i) {  // -128 * (the block's code sum)
        for (int b = 0; b < blocks; ++b) {
          int sum = 0;
          for (int t = 0; t < 32; ++t) sum += blocks_only.codes[i * padded + b * 32 + t];
          ASSERT_EQ(blocks_only.block_offset[i * blocks + b], -128 * sum) << i << "," << b;
        }
      }
    }
    const auto& ref = got.front();
    ASSERT_EQ(ref.padded_k, padded);
    for (int i = 0; i < n; ++i) {
      for (int b = 0; b < blocks; ++b) {
        const float s = ref.scales[i * blocks + b];
        for (int t = b * 32; t < b * 32 + 32; ++t) {
          const int8_t q = ref.codes[i * padded + t];
          EXPECT_LE(std::abs(int{q}), 127);
          if (t >= k) {
            EXPECT_EQ(q, 0);
          }
          const float v = t < k ? x[i * k + t] : 0.0f;
          if (std::isfinite(v) && std::isfinite(s)) {
            EXPECT_LE(std::abs(v - q * s), 0.5f * s + 1e-30f) << i << "," << t;
          }
        }
      }
    }
    EXPECT_EQ(ref.scales[1], 0.0f);  // the zero block
    for (const auto& other : got) {
      EXPECT_EQ(0, std::memcmp(other.codes.data(), ref.codes.data(), n * padded));
      EXPECT_EQ(0, std::memcmp(other.scales.data(), ref.scales.data(), n * blocks * 4));
      if (cpu::CpuHasAvx512Vnni()) {  // n * padded / 4 int32 offsets
        EXPECT_EQ(0, std::memcmp(other.offset.data(), ref.offset.data(), n * padded));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatMulQ8Test,
                         ::testing::Values(std::make_tuple(1, 769, 75), std::make_tuple(5, 67, 131),
                                           std::make_tuple(17, 130, 64), std::make_tuple(2, 3, 7),
                                           std::make_tuple(9, 41, 200),
                                           std::make_tuple(1, 300, 768), std::make_tuple(6, 19, 97),
                                           std::make_tuple(4, 9, 2048),
                                           // m % 16 == 0: the AMX path where present.
                                           std::make_tuple(1, 32, 768), std::make_tuple(19, 48, 96),
                                           std::make_tuple(35, 64, 75),
                                           std::make_tuple(3, 16, 2048),
                                           std::make_tuple(18, 32, 2144),
                                           // one and four rows over blocks of four panels and one
                                           std::make_tuple(17, 80, 96), std::make_tuple(4, 80, 96),
                                           std::make_tuple(20, 80, 64)));

// Backend::MatMuls: products of one x give each product's MatMul bits, on the shared
// Q8 pass (adopted weights with kept VNNI panels, m % 16 == 0), on products it runs one by
// one (m % 16 != 0, F32 weights, more than kMaxQ8Products) and on the reference backend.
TEST(MatMulProductsTest, EachProductHasItsMatMulBits) {
  Rig r;
  for (const int k : {96, 200}) {
    const std::vector<int> ms = {48, 16, 80, 24, 32};  // 24: no panels
    const size_t row_bytes = Q8RowBytes(k);
    size_t total = 0;
    std::vector<size_t> at;
    for (int m : ms) {
      at.push_back(total);
      total += m * row_bytes;
    }
    std::vector<uint8_t> host(total);
    std::vector<float> f32;  // the same weights as F32, one matrix after another
    for (size_t p = 0; p < ms.size(); ++p) {
      auto w = Random(static_cast<size_t>(ms[p]) * k, 40 + p, 0.2f);
      for (int j = 0; j < ms[p]; ++j) {
        quant::QuantizeRowQ8(w.data() + static_cast<size_t>(j) * k, k,
                             host.data() + at[p] + j * row_bytes);
      }
      f32.insert(f32.end(), w.begin(), w.end());
    }
    auto adopted = r.opt->AdoptWeights(host.data(), host.size(), nullptr);
    ASSERT_TRUE(adopted.ok()) << adopted.status();
    uint8_t* base = static_cast<uint8_t*>((*adopted)->data());
    auto bias = Random(80, 50);
    for (const int n : {1, 3, 5, 16, 17}) {
      auto x = Random(static_cast<size_t>(n) * k, 60 + n);
      for (const DType dt : {DType::kQ8, DType::kF32}) {
        // Products 0..count-1 of ms, biased every other one.
        for (const int count : {2, 3, 4, 5}) {
          SCOPED_TRACE(::testing::Message() << "k " << k << " n " << n << " dtype " << DTypeName(dt)
                                            << " products " << count);
          std::vector<std::vector<float>> got(count), want(count);
          std::vector<Backend::MatMulProduct> products;
          size_t f32_at = 0;
          for (int p = 0; p < count; ++p) {
            const int m = ms[p];
            void* w = dt == DType::kQ8 ? static_cast<void*>(base + at[p])
                                       : static_cast<void*>(f32.data() + f32_at);
            f32_at += static_cast<size_t>(m) * k;
            got[p].assign(static_cast<size_t>(n) * m, -1.0f);
            want[p].assign(got[p].size(), -2.0f);
            const Tensor b = p % 2 == 0 ? T(bias.data(), DType::kF32, {m}) : Tensor();
            products.push_back({T(w, dt, {m, k}), b, T(got[p].data(), DType::kF32, {n, m})});
          }
          // The optimized backend (the shared pass where it applies), then the reference
          // one (MatMul per product).
          for (const bool reference : {false, true}) {
            SCOPED_TRACE(reference ? "reference" : "optimized");
            Backend& be = reference ? *r.ref : *r.opt;
            Stream& st = reference ? *r.s1 : *r.s2;
            const Tensor xt = T(x.data(), DType::kF32, {n, k});
            for (int p = 0; p < count; ++p) {
              std::fill(got[p].begin(), got[p].end(), -1.0f);
              ASSERT_TRUE(be.MatMul(st, xt, products[p].w, products[p].bias,
                                    T(want[p].data(), DType::kF32, {n, ms[p]}))
                              .ok());
            }
            ASSERT_TRUE(be.MatMuls(st, xt, products.data(), count).ok());
            for (int p = 0; p < count; ++p) {
              ASSERT_EQ(0, std::memcmp(got[p].data(), want[p].data(), got[p].size() * 4))
                  << "product " << p;
            }
          }
        }
      }
    }
    // A product with the wrong output shape: InvalidArgument, from the shared path and from
    // the reference backend.
    std::vector<float> x(static_cast<size_t>(2) * k), o1(2 * 48), o2(2 * 16);
    const Backend::MatMulProduct bad[] = {
        {T(base + at[0], DType::kQ8, {48, k}), Tensor(), T(o1.data(), DType::kF32, {2, 48})},
        {T(base + at[1], DType::kQ8, {16, k}), Tensor(), T(o2.data(), DType::kF32, {2, 15})}};
    EXPECT_EQ(r.opt->MatMuls(*r.s2, T(x.data(), DType::kF32, {2, k}), bad, 2).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.ref->MatMuls(*r.s1, T(x.data(), DType::kF32, {2, k}), bad, 2).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(r.opt->MatMuls(*r.s2, T(x.data(), DType::kF32, {2, k}), bad, 0).ok());
  }
}

}  // namespace
}  // namespace kvfold::kernels
