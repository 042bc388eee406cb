// Projector::UseBackend: the projector's matmuls through a kernels::Backend. Here the CPU
// backend stands in for the device (the CUDA twin, label gpu, is
// tests/kernels/cuda/projector_cuda_test.cc): several folds in a row (each fold's memory
// feeds the next), input_layers 1 and 3, odd sizes (d 52, 4 heads of 13, M 5, ffn 156),
// results within 1e-4 of the CPU path; the device scratch is made once and reused; and
// UseBackend(nullptr) gives the CPU path back bit for bit.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/memory/random_projector.h"
#include "kernels/backend.h"

namespace kvfold::memory {
namespace {

ProjectorConfig OddConfig(int input_layers) {
  ProjectorConfig c;
  c.mem_slots = 5;
  c.hidden_size = 52;
  c.num_heads = 4;
  c.ffn_mult = 3;
  c.chunk_size = 11;
  c.window_size = 16;
  c.input_layers = input_layers;
  c.model_fingerprint = "m";
  return c;
}

// RandomProjectorTensors plus non-zero biases (they are zero there) so bias handling is
// checked too.
Fp32TensorMap Tensors(const ProjectorConfig& c) {
  Fp32TensorMap t = RandomProjectorTensors(c, 1.0f, 31);
  std::mt19937 rng(32);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  for (auto& [name, tensor] : t) {
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      for (float& x : tensor.data) x = normal(rng);
    }
  }
  return t;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Three folds: no memory and 11 tokens, then the previous output and 9, then 17 tokens
// (the scratch grows). Returns the three outputs, concatenated.
std::vector<float> Folds(const Projector& p, ProjectorScratch* scratch) {
  const ProjectorConfig& c = p.config();
  const size_t m_floats = static_cast<size_t>(c.mem_slots) * c.hidden_size;
  std::vector<float> all, mem;
  int fold = 0;
  for (int tokens : {11, 9, 17}) {
    const auto hidden = Random(static_cast<size_t>(tokens) * c.input_width(), 40 + fold++);
    std::vector<float> out(m_floats);
    const absl::Status s = p.Forward(mem, hidden, out, scratch);
    EXPECT_TRUE(s.ok()) << s;
    all.insert(all.end(), out.begin(), out.end());
    mem = out;
  }
  return all;
}

class ProjectorBackendTest : public ::testing::TestWithParam<int> {};

TEST_P(ProjectorBackendTest, MatmulsOnABackendMatchTheCpuPath) {
  const ProjectorConfig c = OddConfig(GetParam());
  auto p = Projector::FromTensors(c, Tensors(c), "p");
  ASSERT_TRUE(p.ok()) << p.status();
  Projector& projector = **p;
  ProjectorScratch cpu_scratch;
  const std::vector<float> ref = Folds(projector, &cpu_scratch);
  EXPECT_EQ(cpu_scratch.device, nullptr);

  auto backend = kernels::CreateCpuBackend({.num_threads = 2, .reference = false});
  ASSERT_TRUE(projector.UseBackend(backend.get()).ok());
  EXPECT_EQ(projector.backend(), backend.get());
  ProjectorScratch scratch;
  const std::vector<float> got = Folds(projector, &scratch);
  ASSERT_NE(scratch.device, nullptr);
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double{got[i]} - ref[i]) - 1e-4 * std::fabs(ref[i]);
    worst = std::max(worst, err);
  }
  EXPECT_LE(worst, 1e-4);
  // The same caller again: the device scratch is reused (no new stream or buffers), and
  // the results repeat exactly.
  const ProjectorDeviceScratch* device_scratch = scratch.device.get();
  EXPECT_EQ(Folds(projector, &scratch), got);
  EXPECT_EQ(scratch.device.get(), device_scratch);

  // Back to the CPU path: bit for bit what a projector without a backend computes.
  ASSERT_TRUE(projector.UseBackend(nullptr).ok());
  EXPECT_EQ(projector.backend(), nullptr);
  const std::vector<float> again = Folds(projector, &scratch);
  ASSERT_EQ(again.size(), ref.size());
  EXPECT_EQ(0, std::memcmp(again.data(), ref.data(), ref.size() * sizeof(float)));

  // What loaders call: a CPU engine backend leaves the projector on its own CPU path.
  ASSERT_TRUE(projector.UseEngineBackend(backend.get()).ok());
  EXPECT_EQ(projector.backend(), nullptr);
  EXPECT_EQ(Folds(projector, &scratch), again);
}

INSTANTIATE_TEST_SUITE_P(InputLayers, ProjectorBackendTest, ::testing::Values(1, 3));

}  // namespace
}  // namespace kvfold::memory
