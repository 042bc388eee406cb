// Memory mode across backends: a session run on the GPU exports its state (memory block:
// fp16 memory + window ids), a fresh CPU session imports it and both continue greedily;
// and the reverse. They must pick the same tokens (until the reference's top-2 margin gets
// within float noise, where a tie-break may legitimately differ). Label gpu.
// Also memory mode on INT8 KV engines (memory slots and window int8 on both sides): the
// GPU session against the CPU session step by step, logits within 2e-2 + 2e-2 |cpu| (the
// folds feed GPU hidden states to the projector, and int8 codes of values within F32
// noise of a rounding boundary may differ by one step) and the same greedy token
// wherever the CPU's top-2 margin exceeds 0.1.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/memory_session.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/memory/random_projector.h"
#include "kernels/backend.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/testing/tiny_model.h"

namespace kvfold {
namespace {

struct Side {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<engine::Engine> engine;
};

Side MakeSide(const model::ModelFile& model, const std::string& backend_name,
              core::DType kv_dtype = core::DType::kF32) {
  Side s;
  auto backend = kernels::CreateBackend(backend_name, 2);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return s;
  s.backend = *std::move(backend);
  engine::EngineOptions options;
  options.max_batch_tokens = 32;
  options.kv_dtype = kv_dtype;
  auto eng = engine::Engine::Create(model, s.backend.get(), options);
  EXPECT_TRUE(eng.ok()) << eng.status();
  if (eng.ok()) s.engine = *std::move(eng);
  return s;
}

std::unique_ptr<memory::Projector> MakeProjector(const engine::Engine& engine) {
  memory::ProjectorConfig c;
  c.mem_slots = 5;
  c.hidden_size = engine.config().hidden_size;
  c.num_heads = 4;
  c.ffn_mult = 2;
  c.window_size = 24;
  c.chunk_size = 8;
  c.model_fingerprint = engine.fingerprint();
  auto p = memory::Projector::FromTensors(c, memory::RandomProjectorTensors(c, 1.0f, 7), "p7");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

std::unique_ptr<engine::Session> NewSession(engine::Engine* engine,
                                            const memory::Projector* projector) {
  engine::SessionOptions options;
  options.mode = core::KvMode::kMemory;
  auto s = memory::CreateSession(engine, options, projector);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

int32_t ArgmaxOf(std::span<const float> x, float* margin) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) if (x[i] > x[best]) best = static_cast<int32_t>(i);
  float second = -INFINITY;
  for (size_t i = 0; i < x.size(); ++i) if (static_cast<int32_t>(i) != best) second = std::max(second, x[i]);
  *margin = x[best] - second;
  return best;
}

// Exports from `from` after a prompt long enough for several folds, imports into `to`,
// then both decode greedily; returns the number of steps compared.
int ExportImportContinue(Side& from, Side& to, const memory::Projector& p_from,
                         const memory::Projector& p_to, int vocab) {
  auto a = NewSession(from.engine.get(), &p_from);
  auto b = NewSession(to.engine.get(), &p_to);
  if (!a || !b) return -1;
  std::mt19937 rng(3);
  std::vector<int32_t> prompt(70);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % vocab);
  EXPECT_TRUE(a->Prefill(prompt).ok());
  auto state = a->ExportState();
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return -1;
  EXPECT_GT(state->tokens_folded, 0);
  const absl::Status imported = b->ImportState(*state);
  EXPECT_TRUE(imported.ok()) << imported;
  if (!imported.ok()) return -1;
  int compared = 0;
  for (int step = 0; step < 40; ++step) {
    float margin_a = 0, margin_b = 0;
    const int32_t ta = ArgmaxOf(a->Logits(), &margin_a);
    const int32_t tb = ArgmaxOf(b->Logits(), &margin_b);
    if (std::min(margin_a, margin_b) < 5e-3f) break;  // a float-noise tie: stop comparing
    EXPECT_EQ(ta, tb) << "step " << step;
    if (ta != tb) break;
    ++compared;
    EXPECT_TRUE(a->Append(ta).ok());
    EXPECT_TRUE(b->Append(tb).ok());  // folds happen on both sides along the way
  }
  return compared;
}

// Per-layer memory K/V maps (docs/memory-mode.md) run on the CPU backends only: on the
// device a session with such a projector is refused with a precise status, never run
// without its maps.
TEST(CudaMemoryMode, PerLayerMemoryKvIsRefusedOnTheDevice) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const model::ModelFile model = ::kvfold::testing::RandomTinyModel(
      11, ::kvfold::testing::Tiny96(false), core::DType::kF32);
  Side gpu = MakeSide(model, "cuda:0");
  ASSERT_TRUE(gpu.engine);
  auto plain = MakeProjector(*gpu.engine);
  ASSERT_TRUE(plain);
  memory::ProjectorConfig c = plain->config();
  c.memory_kv_layers = model.config.num_layers;
  c.memory_kv_dim = model.config.kv_dim();
  auto p = memory::Projector::FromTensors(c, memory::RandomProjectorTensors(c, 1.0f, 7), "p7kv");
  ASSERT_TRUE(p.ok()) << p.status();
  engine::SessionOptions options;
  options.mode = core::KvMode::kMemory;
  auto s = memory::CreateSession(gpu.engine.get(), options, p->get());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented) << s.status();
  EXPECT_NE(s.status().message().find("memory_kv_layers"), std::string::npos) << s.status();
}

TEST(CudaMemoryMode, GpuExportCpuImportAndReverseContinueIdentically) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const model::ModelFile model = ::kvfold::testing::RandomTinyModel(
      11, ::kvfold::testing::Tiny96(false), core::DType::kF32);
  Side gpu = MakeSide(model, "cuda:0");
  Side cpu = MakeSide(model, "cpu-ref");
  ASSERT_TRUE(gpu.engine && cpu.engine);
  ASSERT_EQ(gpu.engine->fingerprint(), cpu.engine->fingerprint());
  auto p_gpu = MakeProjector(*gpu.engine);
  auto p_cpu = MakeProjector(*cpu.engine);
  ASSERT_TRUE(p_gpu && p_cpu);
  const int vocab = model.config.vocab_size;
  const int n1 = ExportImportContinue(gpu, cpu, *p_gpu, *p_cpu, vocab);
  const int n2 = ExportImportContinue(cpu, gpu, *p_cpu, *p_gpu, vocab);
  EXPECT_GE(n1, 10) << "GPU -> CPU compared too few steps";
  EXPECT_GE(n2, 10) << "CPU -> GPU compared too few steps";
}

TEST(CudaMemoryMode, Int8KvGpuSessionMatchesCpuSession) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const model::ModelFile model = ::kvfold::testing::RandomTinyModel(
      11, ::kvfold::testing::Tiny96(false), core::DType::kF32);
  Side gpu = MakeSide(model, "cuda:0", core::DType::kI8);
  Side cpu = MakeSide(model, "cpu-ref", core::DType::kI8);
  ASSERT_TRUE(gpu.engine && cpu.engine);
  auto p_gpu = MakeProjector(*gpu.engine);
  auto p_cpu = MakeProjector(*cpu.engine);
  ASSERT_TRUE(p_gpu && p_cpu);
  auto a = NewSession(gpu.engine.get(), p_gpu.get());
  auto b = NewSession(cpu.engine.get(), p_cpu.get());
  ASSERT_TRUE(a && b);
  const int vocab = model.config.vocab_size;
  std::mt19937 rng(4);
  std::vector<int32_t> prompt(70);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % vocab);
  ASSERT_TRUE(a->Prefill(prompt).ok());
  ASSERT_TRUE(b->Prefill(prompt).ok());
  int decided = 0;
  for (int step = 0; step < 40; ++step) {
    const std::vector<float> la(a->Logits().begin(), a->Logits().end());
    const std::vector<double> lb(b->Logits().begin(), b->Logits().end());
    kernels::cuda::testing::ExpectClose(la, lb, 2e-2, 2e-2, "int8 memory-mode logits, step " +
                                                      std::to_string(step));
    float margin_a = 0, margin_b = 0;
    const int32_t ta = ArgmaxOf(a->Logits(), &margin_a);
    const int32_t tb = ArgmaxOf(b->Logits(), &margin_b);
    if (margin_b > 0.1f) {
      EXPECT_EQ(ta, tb) << "step " << step;
      ++decided;
    }
    // Both follow the CPU's greedy token, so differences cannot compound through
    // different inputs; folds happen along the way.
    ASSERT_TRUE(a->Append(tb).ok());
    ASSERT_TRUE(b->Append(tb).ok());
  }
  EXPECT_GE(decided, 20) << "too few steps with a clear greedy token";
  auto state_a = a->ExportState();
  auto state_b = b->ExportState();
  ASSERT_TRUE(state_a.ok() && state_b.ok());
  EXPECT_GT(state_a->tokens_folded, 0);
  EXPECT_EQ(state_a->tokens_folded, state_b->tokens_folded);
}

}  // namespace
}  // namespace kvfold
