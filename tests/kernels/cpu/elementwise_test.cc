// SiluMul and RmsNorm on the CPU backends: every ISA path gives the same bits, an
// element's (row's) result does not depend on where it sits in the call (batch
// invariance), and both agree with the formulas computed in double. ArgmaxRow: every path
// gives the index of a left-to-right scan.
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"
#include "tests/kernels/cpu/cpu_test_util.h"

namespace kvfold::kernels {
namespace {

using testing::IsaScope;
using testing::Random;

// Calls fn(backend, stream) on both CPU backends under every ISA path this CPU runs.
template <typename Fn>
void ForEachPath(Fn fn) {
  for (int i = 0; i <= static_cast<int>(cpu::CpuBestIsa()); ++i) {
    const cpu::Isa isa = static_cast<cpu::Isa>(i);
    SCOPED_TRACE(cpu::IsaName(isa));
    IsaScope scope(isa);
    for (bool reference : {true, false}) {
      SCOPED_TRACE(reference ? "cpu-ref" : "cpu");
      std::unique_ptr<Backend> be = CreateCpuBackend({1, reference});
      auto s = be->CreateStream();
      fn(*be, *s);
    }
  }
}

TEST(ElementwiseTest, SiluMulIsIdenticalOnEveryPathAndMatchesTheFormula) {
  constexpr int64_t kCount = 16 * 5 + 7;  // whole vectors and a tail
  std::vector<float> g = Random(kCount, 1, 12.0f), u = Random(kCount, 2, 3.0f);
  g[0] = 0.0f;
  g[1] = -100.0f;  // exp(100) overflows float: silu -> -0
  g[2] = 100.0f;
  g[3] = -87.0f;
  g[kCount - 1] = 40.0f;
  std::vector<float> first;
  ForEachPath([&](Backend& be, Stream& s) {
    std::vector<float> out(kCount);
    ASSERT_TRUE(be.SiluMul(s, MakeTensor(g.data(), DType::kF32, {kCount}),
                           MakeTensor(u.data(), DType::kF32, {kCount}),
                           MakeTensor(out.data(), DType::kF32, {kCount})).ok());
    if (first.empty()) first = out;
    EXPECT_EQ(0, std::memcmp(out.data(), first.data(), kCount * sizeof(float)));
    for (int64_t j = 0; j < kCount; ++j) {
      const double want = g[j] / (1.0 + std::exp(-double{g[j]})) * u[j];
      EXPECT_NEAR(out[j], want, 1e-6 * std::abs(want) + 1e-30) << j << " g " << g[j];
    }
    // Every element alone (a tail of one) gives its bits inside the call.
    for (int64_t j : {int64_t{0}, int64_t{5}, int64_t{17}, kCount - 1}) {
      float one = 0.0f;
      ASSERT_TRUE(be.SiluMul(s, MakeTensor(&g[j], DType::kF32, {1}), MakeTensor(&u[j], DType::kF32, {1}),
                             MakeTensor(&one, DType::kF32, {1})).ok());
      EXPECT_EQ(0, std::memcmp(&one, &out[j], sizeof(float))) << j;
    }
  });
}

// Large ops run on the pool in pieces: the same bits as the reference backend's one pass,
// with a tail that is not a whole vector.
TEST(ElementwiseTest, LargeSiluMulAndAddOnThePoolKeepTheBits) {
  constexpr int64_t kCount = 8 * 4096 + 5;
  const std::vector<float> g = Random(kCount, 3, 12.0f), u = Random(kCount, 4, 3.0f);
  std::unique_ptr<Backend> ref = CreateCpuBackend({1, true});
  std::unique_ptr<Backend> opt = CreateCpuBackend({2, false});
  auto rs = ref->CreateStream();
  auto os = opt->CreateStream();
  auto t = [](const std::vector<float>& v) {
    return MakeTensor(const_cast<float*>(v.data()), DType::kF32, {kCount});
  };
  std::vector<float> silu_ref(kCount), silu_opt(kCount), add_ref(kCount), add_opt(kCount);
  ASSERT_TRUE(ref->SiluMul(*rs, t(g), t(u), t(silu_ref)).ok());
  ASSERT_TRUE(opt->SiluMul(*os, t(g), t(u), t(silu_opt)).ok());
  EXPECT_EQ(0, std::memcmp(silu_ref.data(), silu_opt.data(), kCount * sizeof(float)));
  ASSERT_TRUE(ref->Add(*rs, t(g), t(u), t(add_ref)).ok());
  ASSERT_TRUE(opt->Add(*os, t(g), t(u), t(add_opt)).ok());
  EXPECT_EQ(0, std::memcmp(add_ref.data(), add_opt.data(), kCount * sizeof(float)));
  for (int64_t j = 0; j < kCount; j += 997) EXPECT_EQ(add_opt[j], g[j] + u[j]) << j;
}

TEST(ElementwiseTest, RmsNormIsIdenticalOnEveryPathAndMatchesTheFormula) {
  for (int64_t d : {int64_t{8}, int64_t{48}, int64_t{100}}) {
    SCOPED_TRACE(d);
    constexpr int64_t kRows = 5;
    std::vector<float> x = Random(kRows * d, 3, 4.0f), w = Random(d, 4, 2.0f);
    std::vector<float> first;
    ForEachPath([&](Backend& be, Stream& s) {
      std::vector<float> out(x.size());
      ASSERT_TRUE(be.RmsNorm(s, MakeTensor(x.data(), DType::kF32, {kRows, d}),
                             MakeTensor(w.data(), DType::kF32, {d}), 1e-5f,
                             MakeTensor(out.data(), DType::kF32, {kRows, d})).ok());
      if (first.empty()) first = out;
      EXPECT_EQ(0, std::memcmp(out.data(), first.data(), out.size() * sizeof(float)));
      for (int64_t r = 0; r < kRows; ++r) {
        double ss = 0;
        for (int64_t j = 0; j < d; ++j) ss += double{x[r * d + j]} * x[r * d + j];
        const double inv = 1.0 / std::sqrt(ss / d + 1e-5);
        for (int64_t j = 0; j < d; ++j) {
          const double want = x[r * d + j] * inv * w[j];
          EXPECT_NEAR(out[r * d + j], want, 1e-5 * std::abs(want) + 1e-6) << r << "," << j;
        }
        std::vector<float> one(d);
        ASSERT_TRUE(be.RmsNorm(s, MakeTensor(x.data() + r * d, DType::kF32, {1, d}),
                               MakeTensor(w.data(), DType::kF32, {d}), 1e-5f,
                               MakeTensor(one.data(), DType::kF32, {1, d})).ok());
        EXPECT_EQ(0, std::memcmp(one.data(), out.data() + r * d, d * sizeof(float))) << r;
      }
    });
  }
}

// The scan ArgmaxRow must equal: take an element only when it is greater than the best.
int64_t ScanArgmax(const std::vector<float>& x) {
  int64_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[best]) best = static_cast<int64_t>(i);
  }
  return x.empty() ? 0 : best;
}

TEST(ElementwiseTest, ArgmaxRowEqualsTheScanOnEveryPath) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> cases = {
      {},
      {nan, 5.0f, 7.0f},  // NaN first: index 0
      {-inf, -inf},
      {-0.0f, 0.0f, -0.0f},  // equal zeros: the first
  };
  std::mt19937 rng(7);
  // Sizes around the 16-lane vectors and the 64-element rounds; few distinct values, so
  // ties across lanes are common.
  for (int n : {1, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129, 32000, 32001}) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<float> x(n);
      for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 7) - 3);
      if (variant == 1) {
        for (int i = 0; i < n; i += 3) x[i] = nan;
        x[0] = -3.0f;
      }
      if (variant == 2) x[n - 1] = 9.0f;  // the maximum in the tail past the last chunk
      if (variant == 3) {
        for (float& v : x) v = -0.0f;
        x[n / 2] = 0.0f;
      }
      cases.push_back(std::move(x));
    }
  }
  for (int i = 0; i <= static_cast<int>(cpu::CpuBestIsa()); ++i) {
    const cpu::Isa isa = static_cast<cpu::Isa>(i);
    SCOPED_TRACE(cpu::IsaName(isa));
    IsaScope scope(isa);
    for (size_t c = 0; c < cases.size(); ++c) {
      const std::vector<float>& x = cases[c];
      EXPECT_EQ(cpu::ArgmaxRow(x.data(), static_cast<int64_t>(x.size())), ScanArgmax(x))
          << "case " << c << ", n " << x.size();
    }
  }
}

// The sampler's integer masses: identical on every path, whole vectors and a tail alike,
// and within float exp's error of round(exp((x - max) * inv_t) * 2^40) computed in double;
// 0 (with key 0) for NaN, -inf, weights below min_w and weights that round to 0.
TEST(ElementwiseTest, SamplingMassRowIsIdenticalOnEveryPathAndMatchesTheFormula) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{37}, int64_t{5000}}) {
    SCOPED_TRACE(n);
    std::vector<float> x = Random(n, 3, 6.0f);
    const float max = *std::max_element(x.begin(), x.end());
    if (n > 30) {
      x[3] = nan;
      x[4] = -inf;
      x[5] = max - 60.0f;  // exp(-60 / 0.7) * 2^40 < 0.5: rounds to 0
      x[6] = max;
      x[n - 1] = max;  // in the tail
    }
    for (float min_w : {0.0f, 0.05f}) {
      std::vector<uint32_t> first_keys;
      std::vector<uint64_t> first_mass;
      uint64_t first_total = 0;
      for (int i = 0; i <= static_cast<int>(cpu::CpuBestIsa()); ++i) {
        const cpu::Isa isa = static_cast<cpu::Isa>(i);
        SCOPED_TRACE(cpu::IsaName(isa));
        IsaScope scope(isa);
        std::vector<uint32_t> keys(n, 7);
        std::vector<uint64_t> mass(n, 7);
        const uint64_t total =
            cpu::SamplingMassRow(x.data(), n, max, 1.0f / 0.7f, min_w, keys.data(), mass.data());
        if (first_mass.empty()) {
          first_keys = keys;
          first_mass = mass;
          first_total = total;
        }
        EXPECT_EQ(keys, first_keys);
        EXPECT_EQ(mass, first_mass);
        EXPECT_EQ(total, first_total);
        uint64_t sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          sum += mass[j];
          const double w = std::exp((double{x[j]} - max) * (1.0 / 0.7));
          if (std::isnan(x[j]) || w < min_w || w * 0x1p40 < 0.49) {
            EXPECT_EQ(mass[j], 0u) << j;
            EXPECT_EQ(keys[j], 0u) << j;
            continue;
          }
          // exp's error grows with its argument: (x - max) * inv_t is rounded to float.
          const double rel = 2e-7 + 1.5e-7 * std::abs(std::log(w));
          EXPECT_NEAR(static_cast<double>(mass[j]), w * 0x1p40, rel * w * 0x1p40 + 1) << j;
          EXPECT_EQ(mass[j] > 0, keys[j] != 0) << j;
          if (keys[j] != 0) {
            EXPECT_NEAR(std::bit_cast<float>(keys[j]), w, rel * w) << j;
          }
        }
        EXPECT_EQ(total, sum);
        if (n > 30) {
          EXPECT_EQ(mass[6], uint64_t{1} << 40);  // the largest logit weighs exactly 1
          EXPECT_EQ(keys[6], std::bit_cast<uint32_t>(1.0f));
        }
      }
    }
  }
}

// The log-softmax normaliser: identical on every path and within float exp's error of the
// sum in double; terms below e^-87, -inf and NaN add 0.
TEST(ElementwiseTest, SumExpRowIsIdenticalOnEveryPathAndMatchesTheSum) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{37}, int64_t{32000}}) {
    SCOPED_TRACE(n);
    std::vector<float> x = Random(n, 5, 9.0f);
    if (n > 30) {
      x[2] = -inf;
      x[3] = -200.0f;
    }
    const float max = *std::max_element(x.begin(), x.end());
    double want = 0;
    for (float v : x) want += std::exp(double{v} - max);
    double first = 0;
    for (int i = 0; i <= static_cast<int>(cpu::CpuBestIsa()); ++i) {
      const cpu::Isa isa = static_cast<cpu::Isa>(i);
      SCOPED_TRACE(cpu::IsaName(isa));
      IsaScope scope(isa);
      const double got = cpu::SumExpRow(x.data(), n, max);
      if (i == 0) first = got;
      EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(first));
      EXPECT_NEAR(got, want, 4e-7 * want);
      if (n > 30) {
        std::vector<float> with_nan = x;
        with_nan[n - 1] = std::numeric_limits<float>::quiet_NaN();
        EXPECT_EQ(cpu::SumExpRow(with_nan.data(), n - 1, max),
                  cpu::SumExpRow(with_nan.data(), n, max));
      }
    }
  }
}

}  // namespace
}  // namespace kvfold::kernels
