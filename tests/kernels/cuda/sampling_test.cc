// Device argmax and temperature/top-k/top-p sampling vs their CPU twin (the semantics in
// kernels/cuda/sampling.cuh), on vocabularies of odd sizes.
#include "kernels/cuda/sampling.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace kvfold::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::ExpectOk;
using testing::RandomFloats;

int32_t CpuArgmax(const float* x, int vocab) {
  int32_t best = -1;
  for (int i = 0; i < vocab; ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return best < 0 ? 0 : best;
}

// Returns the token; *ambiguous when the draw lands within float noise of a boundary.
int32_t CpuSample(const float* x, int vocab, const SamplingParams& sp, bool* ambiguous) {
  *ambiguous = false;
  if (sp.temperature <= 0 || sp.top_k == 1) return CpuArgmax(x, vocab);
  float mx = -INFINITY;
  for (int i = 0; i < vocab; ++i) if (!std::isnan(x[i])) mx = std::max(mx, x[i]);
  std::vector<double> w(vocab);
  for (int i = 0; i < vocab; ++i) w[i] = std::isnan(x[i]) ? 0 : std::exp((double{x[i]} - mx) / sp.temperature);
  std::vector<int> order;
  for (int i = 0; i < vocab; ++i) if (!std::isnan(x[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
  float threshold = -INFINITY;
  if (sp.top_k > 0 && sp.top_k < vocab) threshold = x[order[sp.top_k - 1]];
  if (sp.top_p > 0 && sp.top_p < 1) {
    double mass_k = 0;
    for (int i : order) if (x[i] >= threshold) mass_k += w[i];
    double cum = 0;
    for (int i : order) {
      cum += w[i];
      if (cum >= sp.top_p * mass_k) {
        if (std::fabs(cum - sp.top_p * mass_k) < 1e-5 * mass_k) *ambiguous = true;
        threshold = std::max(threshold, x[i]);
        break;
      }
    }
  }
  double total = 0;
  for (int i = 0; i < vocab; ++i) if (!std::isnan(x[i]) && x[i] >= threshold) total += w[i];
  const double target = SamplingUniform(sp.seed, sp.step) * total;
  double running = 0;
  int last = 0;
  for (int i = 0; i < vocab; ++i) {
    if (std::isnan(x[i]) || x[i] < threshold) continue;
    running += w[i];
    last = i;
    if (running > target) {
      if (running - target < 1e-5 * total || target - (running - w[i]) < 1e-5 * total) {
        *ambiguous = true;
      }
      return i;
    }
  }
  return last;
}

TEST(CudaSampling, ArgmaxLowestIndexOnTiesAndIgnoresNan) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const int rows = 7, vocab = 5125;
  auto logits = RandomFloats(rows * vocab, 1, -10, 10);
  logits[0 * vocab + 100] = 50;
  logits[0 * vocab + 3000] = 50;
  logits[1 * vocab + 5124] = 99;
  logits[2 * vocab + 7] = std::numeric_limits<float>::quiet_NaN();
  logits[2 * vocab + 8] = 60;
  DeviceArray<float> d_logits(logits);
  DeviceArray<int32_t> d_tokens(rows);
  ExpectOk(Argmax(d_logits.get(), rows, vocab, d_tokens.get(), nullptr));
  const auto tokens = d_tokens.ToHost();
  EXPECT_EQ(tokens[0], 100);
  EXPECT_EQ(tokens[1], 5124);
  EXPECT_EQ(tokens[2], 8);
  for (int r = 0; r < rows; ++r) EXPECT_EQ(tokens[r], CpuArgmax(&logits[r * vocab], vocab)) << r;
}

TEST(CudaSampling, TopKTopPMatchesCpuTwin) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const int vocab = 32003;
  const std::vector<SamplingParams> configs = {
      {0.8f, 50, 0.9f, 0, 11, 0}, {1.2f, 0, 0.5f, 0, 12, 0}, {1.0f, 7, 1.0f, 0, 13, 0},
      {0.7f, 0, 1.0f, 0, 14, 0},  {1.0f, 1, 1.0f, 0, 15, 0}, {0.0f, 40, 0.9f, 0, 16, 0},
      {2.0f, 1000, 0.95f, 0, 17, 0}};
  const int steps = 24;
  const int rows = static_cast<int>(configs.size()) * steps;
  std::vector<SamplingParams> params;
  for (const auto& c : configs) {
    for (int s = 0; s < steps; ++s) {
      params.push_back(c);
      params.back().step = s;
    }
  }
  // Peaked logits like a real model's: a few large, many small.
  auto logits = RandomFloats(static_cast<size_t>(rows) * vocab, 2, -4, 4);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < 30; ++j) logits[static_cast<size_t>(r) * vocab + (r * 131 + j * 977) % vocab] += 6 + j * 0.1f;
  }
  DeviceArray<float> d_logits(logits);
  DeviceArray<SamplingParams> d_params(params);
  DeviceArray<int32_t> d_tokens(rows);
  ExpectOk(Sample(d_logits.get(), rows, vocab, d_params.get(), d_tokens.get(), nullptr));
  const auto tokens = d_tokens.ToHost();
  int compared = 0;
  for (int r = 0; r < rows; ++r) {
    bool ambiguous = false;
    const int32_t want = CpuSample(&logits[static_cast<size_t>(r) * vocab], vocab, params[r], &ambiguous);
    if (ambiguous) continue;
    ++compared;
    EXPECT_EQ(tokens[r], want) << "row " << r << " T=" << params[r].temperature
                               << " k=" << params[r].top_k << " p=" << params[r].top_p;
  }
  EXPECT_GT(compared, rows * 9 / 10);
}

TEST(CudaSampling, UniformIsInRangeAndSpread) {
  double sum = 0;
  for (uint64_t s = 0; s < 10000; ++s) {
    const float u = SamplingUniform(7, s);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace kvfold::kernels::cuda
