// Random tiny models built in memory for the CUDA-vs-CPU engine tests.
#ifndef KVFOLD_TESTS_KERNELS_CUDA_TINY_MODEL_H_
#define KVFOLD_TESTS_KERNELS_CUDA_TINY_MODEL_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "inference_svc/model/config.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"

namespace kvfold::cuda::testing {

using kernels::DType;

inline model::HostTensor RandomTensor(std::vector<int64_t> shape, DType dtype, float lo,
                                      float hi, std::mt19937* rng) {
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

// A random tiny Llama (or Qwen2: q/k/v biases, tied embeddings) held in memory: hidden 96,
// 2 layers, 6 heads / 2 KV heads of 16, intermediate 200, vocab 261.
inline model::ModelFile TinyModel(DType dtype, bool qwen2, uint32_t seed) {
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

}  // namespace kvfold::cuda::testing

#endif  // KVFOLD_TESTS_KERNELS_CUDA_TINY_MODEL_H_
