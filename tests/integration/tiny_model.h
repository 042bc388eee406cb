// A deterministic random tiny Llama (hidden 64, 2 layers, 4 heads, 2 KV heads, vocab 256,
// intermediate 160) written as an HF directory, for service tests that must not depend on
// other tools being built. Same shape as make_random_model's "tiny".
#ifndef KVFOLD_TESTS_INTEGRATION_TINY_MODEL_H_
#define KVFOLD_TESTS_INTEGRATION_TINY_MODEL_H_

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "inference_svc/model/model_file.h"

namespace kvfold::testing {

inline absl::Status WriteTinyModel(const std::string& dir, uint64_t seed) {
  model::ModelFile m;
  model::ModelConfig& c = m.config;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 256;
  c.max_position_embeddings = 4096;
  c.tie_word_embeddings = false;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, bool ones) {
    auto data = std::make_shared<std::vector<float>>();
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    data->resize(static_cast<size_t>(n));
    for (float& x : *data) x = ones ? 1.0f : normal(rng) * scale;
    model::HostTensor t;
    t.dtype = kernels::DType::kF32;
    t.shape = shape;
    t.data = data->data();
    t.size_bytes = data->size() * sizeof(float);
    t.keepalive = data;
    m.tensors[name] = std::move(t);
  };
  const int64_t d = c.hidden_size, f = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  add("model.embed_tokens.weight", {c.vocab_size, d}, 1.0f, false);
  add("model.norm.weight", {d}, 0, true);
  add("lm_head.weight", {c.vocab_size, d}, 1.0f / std::sqrt(float(d)), false);
  for (int l = 0; l < c.num_layers; ++l) {
    add(model::LayerTensorName(l, "input_layernorm.weight"), {d}, 0, true);
    add(model::LayerTensorName(l, "post_attention_layernorm.weight"), {d}, 0, true);
    add(model::LayerTensorName(l, "self_attn.q_proj.weight"), {q, d}, 1.0f / std::sqrt(float(d)), false);
    add(model::LayerTensorName(l, "self_attn.k_proj.weight"), {kv, d}, 1.0f / std::sqrt(float(d)), false);
    add(model::LayerTensorName(l, "self_attn.v_proj.weight"), {kv, d}, 1.0f / std::sqrt(float(d)), false);
    add(model::LayerTensorName(l, "self_attn.o_proj.weight"), {d, q}, 1.0f / std::sqrt(float(q)), false);
    add(model::LayerTensorName(l, "mlp.gate_proj.weight"), {f, d}, 1.0f / std::sqrt(float(d)), false);
    add(model::LayerTensorName(l, "mlp.up_proj.weight"), {f, d}, 1.0f / std::sqrt(float(d)), false);
    add(model::LayerTensorName(l, "mlp.down_proj.weight"), {d, f}, 1.0f / std::sqrt(float(f)), false);
  }
  return model::WriteHfDirectory(m, dir, kernels::DType::kF32);
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INTEGRATION_TINY_MODEL_H_
