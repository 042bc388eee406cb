// The MemoryProjector's matmuls on cuBLAS (Projector::UseBackend with the CUDA backend)
// against the CPU projector: |gpu - cpu| <= 1e-4 + 1e-4 |cpu| over three folds in a row
// (each fold's memory feeds the next), input_layers 1 and 3, d 200 (8 heads of 25), M 7,
// ffn 800, 33-token chunks. F32 weights run true F32 GEMMs (no TF32; gemm.cc), so the
// difference is accumulation order only. Label gpu; skips without a device.
// tests/inference_svc/memory/projector_backend_test.cc runs the same wiring on the CPU.
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/memory/random_projector.h"
#include "kernels/backend.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace kvfold::memory {
namespace {

std::vector<float> Folds(const Projector& p, ProjectorScratch* scratch) {
  const ProjectorConfig& c = p.config();
  std::vector<float> all, mem;
  int fold = 0;
  for (int tokens : {33, 33, 20}) {
    std::vector<float> hidden = kernels::cuda::testing::RandomFloats(
        static_cast<size_t>(tokens) * c.input_width(), 50 + fold++, -2, 2);
    std::vector<float> out(static_cast<size_t>(c.mem_slots) * c.hidden_size);
    const absl::Status s = p.Forward(mem, hidden, out, scratch);
    EXPECT_TRUE(s.ok()) << s;
    all.insert(all.end(), out.begin(), out.end());
    mem = out;
  }
  return all;
}

class CudaProjector : public ::testing::TestWithParam<int> {};

TEST_P(CudaProjector, MatmulsOnCublasMatchTheCpuProjector) {
  KVFOLD_SKIP_WITHOUT_GPU();
  ProjectorConfig c;
  c.mem_slots = 7;
  c.hidden_size = 200;
  c.num_heads = 8;
  c.ffn_mult = 4;
  c.chunk_size = 33;
  c.window_size = 64;
  c.input_layers = GetParam();
  Fp32TensorMap tensors = RandomProjectorTensors(c, 1.0f, 61);
  std::mt19937 rng(62);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  for (auto& [name, t] : tensors) {  // non-zero biases
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      for (float& x : t.data) x = normal(rng);
    }
  }
  auto p = Projector::FromTensors(c, tensors, "p");
  ASSERT_TRUE(p.ok()) << p.status();
  ProjectorScratch cpu_scratch;
  const std::vector<float> ref = Folds(**p, &cpu_scratch);

  auto gpu = kernels::CreateBackend("cuda:0", 1);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*p)->UseBackend(gpu->get()).ok());
  ProjectorScratch scratch;
  const std::vector<float> got = Folds(**p, &scratch);
  kernels::cuda::testing::ExpectClose(got, std::vector<double>(ref.begin(), ref.end()), 1e-4, 1e-4,
                             "projector on cuBLAS");
  // Again with the same scratch: same stream and buffers, same results.
  EXPECT_EQ(Folds(**p, &scratch), got);
  ASSERT_TRUE((*p)->UseBackend(nullptr).ok());  // before the backend goes away
}

INSTANTIATE_TEST_SUITE_P(InputLayers, CudaProjector, ::testing::Values(1, 3));

}  // namespace
}  // namespace kvfold::memory
