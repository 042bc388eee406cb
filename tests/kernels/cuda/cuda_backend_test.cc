// The CUDA Backend through the real Engine: whole-model logits against the CPU reference
// backend on random tiny models (GQA, Qwen2 biases, F32 / BF16 weights), prefill and
// token-by-token decode, full and sink-window modes. Label gpu; skips without a device.
//
// Tolerances (docs/cuda.md): F32 weights |gpu - cpu| <= 2e-3 + 2e-3 |cpu| on logits;
// BF16 weights 0.05 + 0.02 |cpu| (the GPU feeds cuBLAS BF16 activations, the CPU keeps
// them F32), plus identical greedy tokens on >= 95% of rows.
// F16 KV (engine kv_dtype f16 on both backends): 4e-3 + 4e-3 |cpu|.
// INT8 KV (engine kv_dtype int8 on both backends): 1e-2 + 1e-2 |cpu|. The two sides
// quantize K/V that differ by F32 noise, so a value within that noise of a rounding
// boundary gets a code one step apart (one step = amax / 127 of its group); the
// tolerance covers a few such flips, not a different quantizer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/kv_cache.h"
#include "inference_svc/model/config.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/testing/tiny_model.h"

namespace kvfold {
namespace {

using core::DType;

// Logits of every step: a prefill of `prompt`, then the fixed `continuation` tokens fed
// one at a time (both backends see identical inputs, so errors cannot compound through
// different sampled tokens).
std::vector<float> RunLogits(const model::ModelFile& model, kernels::Backend* backend,
                             const engine::KvPolicy& policy, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& continuation, core::DType kv_dtype) {
  engine::EngineOptions options;
  options.kv_pool_bytes = size_t{64} << 20;
  options.kv_dtype = kv_dtype;
  auto eng = engine::Engine::Create(model, backend, options);
  EXPECT_TRUE(eng.ok()) << eng.status();
  if (!eng.ok()) return {};
  auto cache = (*eng)->NewCache(policy);
  std::vector<float> logits;
  engine::ForwardResult result;
  engine::SequenceInput in;
  in.cache = cache.get();
  in.token_ids = prompt;
  in.logits = engine::RowSelect::kAll;
  absl::Status s = (*eng)->Forward({&in, 1}, &result);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return {};
  logits.insert(logits.end(), result.outputs[0].logits.begin(), result.outputs[0].logits.end());
  for (size_t i = 0; i < continuation.size(); ++i) {
    in.token_ids = std::span<const int32_t>(&continuation[i], 1);
    in.logits = engine::RowSelect::kLast;
    s = (*eng)->Forward({&in, 1}, &result);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return {};
    logits.insert(logits.end(), result.outputs[0].logits.begin(),
                  result.outputs[0].logits.end());
  }
  return logits;
}

void CompareModels(DType dtype, bool qwen2, const engine::KvPolicy& policy, double tol,
                   double eps, const std::string& what,
                   core::DType kv_dtype = core::DType::kF32) {
  const model::ModelFile model =
      ::kvfold::testing::RandomTinyModel(5, ::kvfold::testing::Tiny96(qwen2), dtype);
  std::mt19937 rng(9);
  std::vector<int32_t> prompt(77), continuation(60);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % model.config.vocab_size);
  for (auto& t : continuation) t = static_cast<int32_t>(rng() % model.config.vocab_size);
  auto cpu = kernels::CreateBackend("cpu-ref", 1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = kernels::CreateBackend("cuda:0", 1);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const auto ref = RunLogits(model, cpu->get(), policy, prompt, continuation, kv_dtype);
  const auto got = RunLogits(model, gpu->get(), policy, prompt, continuation, kv_dtype);
  ASSERT_EQ(ref.size(), got.size());
  ASSERT_FALSE(ref.empty());
  std::vector<double> ref_d(ref.begin(), ref.end());
  kernels::cuda::testing::ExpectClose(got, ref_d, tol, eps, what);
  const int vocab = model.config.vocab_size;
  const int rows = static_cast<int>(ref.size()) / vocab;
  int same = 0;
  for (int r = 0; r < rows; ++r) {
    auto argmax = [&](const std::vector<float>& x) {
      return std::max_element(x.begin() + r * vocab, x.begin() + (r + 1) * vocab) - x.begin();
    };
    same += argmax(ref) == argmax(got);
  }
  EXPECT_GE(same, rows * 95 / 100) << what << ": greedy tokens agree on " << same << "/" << rows;
}

TEST(CudaBackendModel, F32LlamaFullModeMatchesCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  CompareModels(DType::kF32, false, engine::KvPolicy::Full(), 2e-3, 2e-3, "f32 llama full");
}

TEST(CudaBackendModel, F32Qwen2SinkWindowMatchesCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  CompareModels(DType::kF32, true, engine::KvPolicy::Sink(4, 40), 2e-3, 2e-3,
                "f32 qwen2 sink(4)+window(40)");
}

TEST(CudaBackendModel, Bf16LlamaSlidingMatchesCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  CompareModels(DType::kBF16, false, engine::KvPolicy::Sliding(50), 0.05, 0.02,
                "bf16 llama sliding(50)");
}

// F16 KV on both sides: each side rounds K/V that differ by F32 noise to fp16, so a value
// near a rounding boundary lands one fp16 step (2^-11 relative) apart.
TEST(CudaBackendModel, F16KvLlamaSlidingMatchesCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  CompareModels(DType::kF32, false, engine::KvPolicy::Sliding(50), 4e-3, 4e-3,
                "f16 kv llama sliding(50)", core::DType::kF16);
}

// INT8 KV on both sides: the CUDA StoreKvInt8 / AttentionInt8 against the CPU reference
// through the whole engine (77-token prefill = 4 sealed blocks + an open one, then 60
// decode steps that seal 4 more).
TEST(CudaBackendModel, Int8KvLlamaFullModeMatchesCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  CompareModels(DType::kF32, false, engine::KvPolicy::Full(), 1e-2, 1e-2, "int8 kv llama full",
                core::DType::kI8);
}

TEST(CudaBackendModel, Int8KvQwen2SinkWindowMatchesCpu) {
  KVFOLD_SKIP_WITHOUT_GPU();
  // The 4 sink tokens are a partial prefix block sealed when the prefix completes.
  CompareModels(DType::kF32, true, engine::KvPolicy::Sink(4, 40), 1e-2, 1e-2,
                "int8 kv qwen2 sink(4)+window(40)", core::DType::kI8);
}

// KvCache::CopyFrom on the device (BlockPool::CopyBlocks: device-to-device copies of every
// layer's blocks, int8 codes, scales and open pages): a copied cache continues with the
// same logits, bit for bit, as one that fed the prompt itself.
TEST(CudaBackendModel, CopiedCacheContinuesBitwise) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const model::ModelFile model =
      ::kvfold::testing::RandomTinyModel(5, ::kvfold::testing::Tiny96(false), DType::kF32);
  std::mt19937 rng(3);
  std::vector<int32_t> prompt(45), continuation(20);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % model.config.vocab_size);
  for (auto& t : continuation) t = static_cast<int32_t>(rng() % model.config.vocab_size);
  auto gpu = kernels::CreateBackend("cuda:0", 1);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (core::DType kv_dtype : {DType::kF32, DType::kF16, DType::kI8}) {
    SCOPED_TRACE(core::DTypeName(kv_dtype));
    engine::EngineOptions options;
    options.kv_pool_bytes = size_t{32} << 20;
    options.kv_dtype = kv_dtype;
    auto eng = engine::Engine::Create(model, gpu->get(), options);
    ASSERT_TRUE(eng.ok()) << eng.status();
    auto fed = (*eng)->NewCache(engine::KvPolicy::Sink(4, 30));
    auto copied = (*eng)->NewCache(engine::KvPolicy::Sink(4, 30));
    engine::ForwardResult result;
    engine::SequenceInput in;
    in.cache = fed.get();
    in.token_ids = prompt;
    in.logits = engine::RowSelect::kLast;
    ASSERT_TRUE((*eng)->Forward({&in, 1}, &result).ok());
    ASSERT_TRUE(copied->CopyFrom(*fed).ok());
    EXPECT_EQ(copied->resident_tokens(), fed->resident_tokens());
    for (size_t i = 0; i < continuation.size(); ++i) {
      std::vector<std::vector<float>> logits;
      for (engine::KvCache* cache : {copied.get(), fed.get()}) {
        in.cache = cache;
        in.token_ids = std::span<const int32_t>(&continuation[i], 1);
        ASSERT_TRUE((*eng)->Forward({&in, 1}, &result).ok());
        logits.emplace_back(result.outputs[0].logits.begin(), result.outputs[0].logits.end());
      }
      ASSERT_EQ(logits[0], logits[1]) << "step " << i;
    }
  }
}

}  // namespace
}  // namespace kvfold
