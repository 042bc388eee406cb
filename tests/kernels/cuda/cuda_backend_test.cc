// The CUDA Backend through the real Engine: whole-model logits against the CPU reference
// backend on random tiny models (GQA, Qwen2 biases, F32 / BF16 weights), prefill and
// token-by-token decode, full and sink-window modes. Label gpu; skips without a device.
//
// Tolerances (docs/cuda.md): F32 weights |gpu - cpu| <= 2e-3 + 2e-3 |cpu| on logits;
// BF16 weights 0.05 + 0.02 |cpu| (the GPU feeds cuBLAS BF16 activations, the CPU keeps
// them F32), plus identical greedy tokens on >= 95% of rows.
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

namespace kvfold {
namespace {

using kernels::DType;

model::HostTensor RandomTensor(std::vector<int64_t> shape, DType dtype, float lo, float hi,
                               std::mt19937* rng) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::uniform_real_distribution<float> dist(lo, hi);
  auto bytes = std::make_shared<std::vector<uint8_t>>(n * (dtype == DType::kF32 ? 4 : 2));
  for (int64_t i = 0; i < n; ++i) {
    const float x = dist(*rng);
    if (dtype == DType::kF32) {
      std::memcpy(bytes->data() + i * 4, &x, 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? Fp32ToBf16(x) : Fp32ToFp16(x);
      std::memcpy(bytes->data() + i * 2, &h, 2);
    }
  }
  model::HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = bytes->data();
  t.size_bytes = bytes->size();
  t.keepalive = bytes;
  return t;
}

model::ModelFile TinyModel(DType dtype, bool qwen2, uint32_t seed) {
  model::ModelFile m;
  model::ModelConfig& c = m.config;
  c.architecture = qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.hidden_size = 96;
  c.intermediate_size = 200;
  c.num_layers = 2;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 261;
  c.max_position_embeddings = 4096;
  c.qkv_bias = qwen2;
  c.tie_word_embeddings = qwen2;
  std::mt19937 rng(seed);
  const int64_t d = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    m.tensors[name] = RandomTensor(std::move(shape), dtype, lo, hi, &rng);
  };
  add("model.embed_tokens.weight", {c.vocab_size, d}, -1, 1);
  add("model.norm.weight", {d}, 0.8f, 1.2f);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, d}, -0.2f, 0.2f);
  for (int l = 0; l < c.num_layers; ++l) {
    auto n = [l](const char* s) { return model::LayerTensorName(l, s); };
    add(n("input_layernorm.weight"), {d}, 0.8f, 1.2f);
    add(n("post_attention_layernorm.weight"), {d}, 0.8f, 1.2f);
    add(n("self_attn.q_proj.weight"), {q, d}, -0.15f, 0.15f);
    add(n("self_attn.k_proj.weight"), {kv, d}, -0.15f, 0.15f);
    add(n("self_attn.v_proj.weight"), {kv, d}, -0.15f, 0.15f);
    add(n("self_attn.o_proj.weight"), {d, q}, -0.1f, 0.1f);
    add(n("mlp.gate_proj.weight"), {f, d}, -0.1f, 0.1f);
    add(n("mlp.up_proj.weight"), {f, d}, -0.1f, 0.1f);
    add(n("mlp.down_proj.weight"), {d, f}, -0.1f, 0.1f);
    if (qwen2) {
      add(n("self_attn.q_proj.bias"), {q}, -0.1f, 0.1f);
      add(n("self_attn.k_proj.bias"), {kv}, -0.1f, 0.1f);
      add(n("self_attn.v_proj.bias"), {kv}, -0.1f, 0.1f);
    }
  }
  m.source_format = "hf";
  return m;
}

// Logits of every step: a prefill of `prompt`, then the fixed `continuation` tokens fed
// one at a time (both backends see identical inputs, so errors cannot compound through
// different sampled tokens).
std::vector<float> RunLogits(const model::ModelFile& model, kernels::Backend* backend,
                             const engine::KvPolicy& policy, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& continuation) {
  engine::EngineOptions options;
  options.kv_pool_bytes = size_t{64} << 20;
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
                   double eps, const std::string& what) {
  const model::ModelFile model = TinyModel(dtype, qwen2, 5);
  std::mt19937 rng(9);
  std::vector<int32_t> prompt(77), continuation(60);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % model.config.vocab_size);
  for (auto& t : continuation) t = static_cast<int32_t>(rng() % model.config.vocab_size);
  auto cpu = kernels::CreateBackend("cpu-ref", 1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = kernels::CreateBackend("cuda:0", 1);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const auto ref = RunLogits(model, cpu->get(), policy, prompt, continuation);
  const auto got = RunLogits(model, gpu->get(), policy, prompt, continuation);
  ASSERT_EQ(ref.size(), got.size());
  ASSERT_FALSE(ref.empty());
  std::vector<double> ref_d(ref.begin(), ref.end());
  cuda::testing::ExpectClose(got, ref_d, tol, eps, what);
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

}  // namespace
}  // namespace kvfold
