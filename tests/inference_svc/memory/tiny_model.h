// Test helpers for memory-mode tests: a random Llama model built in memory (odd shapes),
// an engine on the CPU backend, and a naive double-precision reference forward pass with
// an explicit mask and explicit positions, written from docs/contracts.md independently of the
// engine.
#ifndef KVFOLD_TESTS_INFERENCE_SVC_MEMORY_TINY_MODEL_H_
#define KVFOLD_TESTS_INFERENCE_SVC_MEMORY_TINY_MODEL_H_

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "inference_svc/engine/engine.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"

namespace kvfold::memory::testing {

struct TinyShape {
  int hidden_size = 48;
  int num_layers = 3;
  int num_heads = 6;  // head_dim 8
  int num_kv_heads = 2;
  int intermediate_size = 80;
  int vocab_size = 97;
};

// A LlamaForCausalLM with N(0, 1/in) weights, N(0, 1) embeddings, norms near 1.
// n token ids uniform in [0, vocab), seeded.
inline std::vector<int32_t> RandomIds(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

inline model::ModelFile RandomTinyModel(uint32_t seed, const TinyShape& shape = {}) {
  model::ModelFile m;
  model::ModelConfig& c = m.config;
  c.hidden_size = shape.hidden_size;
  c.intermediate_size = shape.intermediate_size;
  c.num_layers = shape.num_layers;
  c.num_heads = shape.num_heads;
  c.num_kv_heads = shape.num_kv_heads;
  c.head_dim = shape.hidden_size / shape.num_heads;
  c.vocab_size = shape.vocab_size;
  c.max_position_embeddings = 1024;
  c.tie_word_embeddings = false;
  m.source_path = "<random tiny model>";
  m.source_format = "hf";
  std::mt19937 rng(seed);
  auto add = [&](const std::string& name, std::vector<int64_t> shape_dims, double stddev, double mean) {
    auto data = std::make_shared<std::vector<float>>();
    int64_t n = 1;
    for (int64_t s : shape_dims) n *= s;
    std::normal_distribution<double> normal(mean, stddev);
    data->resize(n);
    for (float& v : *data) v = static_cast<float>(normal(rng));
    model::HostTensor t;
    t.dtype = kernels::DType::kF32;
    t.shape = shape_dims;
    t.data = data->data();
    t.size_bytes = data->size() * sizeof(float);
    t.keepalive = data;
    m.tensors[name] = std::move(t);
  };
  const int64_t d = c.hidden_size, f = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  add("model.embed_tokens.weight", {c.vocab_size, d}, 1.0, 0.0);
  add("model.norm.weight", {d}, 0.1, 1.0);
  add("lm_head.weight", {c.vocab_size, d}, 1.0 / std::sqrt(d), 0.0);
  for (int l = 0; l < c.num_layers; ++l) {
    add(model::LayerTensorName(l, "input_layernorm.weight"), {d}, 0.1, 1.0);
    add(model::LayerTensorName(l, "post_attention_layernorm.weight"), {d}, 0.1, 1.0);
    add(model::LayerTensorName(l, "self_attn.q_proj.weight"), {q, d}, 1.0 / std::sqrt(d), 0.0);
    add(model::LayerTensorName(l, "self_attn.k_proj.weight"), {kv, d}, 1.0 / std::sqrt(d), 0.0);
    add(model::LayerTensorName(l, "self_attn.v_proj.weight"), {kv, d}, 1.0 / std::sqrt(d), 0.0);
    add(model::LayerTensorName(l, "self_attn.o_proj.weight"), {d, q}, 1.0 / std::sqrt(q), 0.0);
    add(model::LayerTensorName(l, "mlp.gate_proj.weight"), {f, d}, 1.0 / std::sqrt(d), 0.0);
    add(model::LayerTensorName(l, "mlp.up_proj.weight"), {f, d}, 1.0 / std::sqrt(d), 0.0);
    add(model::LayerTensorName(l, "mlp.down_proj.weight"), {d, f}, 1.0 / std::sqrt(f), 0.0);
  }
  return m;
}

inline std::vector<float> TensorFloats(const model::ModelFile& m, const std::string& name) {
  const model::HostTensor& t = m.tensors.at(name);
  const float* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.numel());
}

// Naive forward over explicit input rows (embeddings), positions and mask.
//   rows [n, d]; positions [n]; visible(i, j) says whether row i may attend to row j.
// Returns logits [n, vocab] and the last layer's residual output [n, d] (before the norm).
struct NaiveOutput {
  std::vector<std::vector<double>> logits;
  std::vector<std::vector<double>> hidden;
};

template <typename Visible>
NaiveOutput NaiveForward(const model::ModelFile& m, std::vector<std::vector<double>> x,
                         const std::vector<int>& positions, Visible visible) {
  const model::ModelConfig& c = m.config;
  const int n = static_cast<int>(x.size()), d = c.hidden_size, hd = c.head_dim;
  const int group = c.num_heads / c.num_kv_heads;
  auto W = [&](const std::string& name) { return TensorFloats(m, name); };
  auto rmsnorm = [&](const std::vector<double>& v, const std::vector<float>& w) {
    double ss = 0;
    for (double a : v) ss += a * a;
    const double inv = 1.0 / std::sqrt(ss / v.size() + c.rms_norm_eps);
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] * inv * w[i];
    return out;
  };
  auto linear = [](const std::vector<double>& v, const std::vector<float>& w, int out_dim) {
    const int in = static_cast<int>(v.size());
    std::vector<double> y(out_dim, 0.0);
    for (int o = 0; o < out_dim; ++o)
      for (int i = 0; i < in; ++i) y[o] += v[i] * w[static_cast<size_t>(o) * in + i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, int heads, int pos) {  // HF rotate_half
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / hd);
        const double a = pos * freq, cs = std::cos(a), sn = std::sin(a);
        double& x1 = v[h * hd + i];
        double& x2 = v[h * hd + i + hd / 2];
        const double y1 = x1 * cs - x2 * sn, y2 = x2 * cs + x1 * sn;
        x1 = y1;
        x2 = y2;
      }
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const auto wq = W(model::LayerTensorName(l, "self_attn.q_proj.weight"));
    const auto wk = W(model::LayerTensorName(l, "self_attn.k_proj.weight"));
    const auto wv = W(model::LayerTensorName(l, "self_attn.v_proj.weight"));
    const auto wo = W(model::LayerTensorName(l, "self_attn.o_proj.weight"));
    const auto norm1 = W(model::LayerTensorName(l, "input_layernorm.weight"));
    const auto norm2 = W(model::LayerTensorName(l, "post_attention_layernorm.weight"));
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int i = 0; i < n; ++i) {
      const auto h = rmsnorm(x[i], norm1);
      q[i] = linear(h, wq, c.q_dim());
      k[i] = linear(h, wk, c.kv_dim());
      v[i] = linear(h, wv, c.kv_dim());
      rope(q[i], c.num_heads, positions[i]);
      rope(k[i], c.num_kv_heads, positions[i]);
    }
    std::vector<std::vector<double>> attn(n, std::vector<double>(c.q_dim(), 0.0));
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < c.num_heads; ++h) {
        const int kvh = h / group;
        std::vector<double> s(n, -INFINITY);
        double mx = -INFINITY;
        for (int j = 0; j < n; ++j) {
          if (!visible(i, j)) continue;
          double dot = 0;
          for (int t = 0; t < hd; ++t) dot += q[i][h * hd + t] * k[j][kvh * hd + t];
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx);
        for (int j = 0; j < n; ++j) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - mx) / sum;
          for (int t = 0; t < hd; ++t) attn[i][h * hd + t] += p * v[j][kvh * hd + t];
        }
      }
    const auto wg = W(model::LayerTensorName(l, "mlp.gate_proj.weight"));
    const auto wu = W(model::LayerTensorName(l, "mlp.up_proj.weight"));
    const auto wd = W(model::LayerTensorName(l, "mlp.down_proj.weight"));
    for (int i = 0; i < n; ++i) {
      const auto o = linear(attn[i], wo, d);
      for (int t = 0; t < d; ++t) x[i][t] += o[t];
      const auto h = rmsnorm(x[i], norm2);
      auto g = linear(h, wg, c.intermediate_size);
      const auto u = linear(h, wu, c.intermediate_size);
      for (int t = 0; t < c.intermediate_size; ++t) g[t] = g[t] / (1.0 + std::exp(-g[t])) * u[t];
      const auto down = linear(g, wd, d);
      for (int t = 0; t < d; ++t) x[i][t] += down[t];
    }
  }
  NaiveOutput out;
  out.hidden = x;
  const auto final_norm = W("model.norm.weight");
  const auto head = W("lm_head.weight");
  for (int i = 0; i < n; ++i) out.logits.push_back(linear(rmsnorm(x[i], final_norm), head, c.vocab_size));
  return out;
}

// Forward(mem, w) by the memory-mode rules: mem rows at position 0, bidirectional among
// themselves, attending to nothing else; window token i at position i + 1, seeing all of
// mem and window tokens 0..i.
inline NaiveOutput NaiveMemoryForward(const model::ModelFile& m, const std::vector<float>& mem,
                                      const std::vector<int32_t>& window) {
  const int d = m.config.hidden_size;
  const int num_mem = static_cast<int>(mem.size()) / d;
  const auto embed = TensorFloats(m, "model.embed_tokens.weight");
  std::vector<std::vector<double>> rows;
  std::vector<int> positions;
  for (int s = 0; s < num_mem; ++s) {
    rows.emplace_back(mem.begin() + s * d, mem.begin() + (s + 1) * d);
    positions.push_back(0);
  }
  for (size_t i = 0; i < window.size(); ++i) {
    rows.emplace_back(embed.begin() + static_cast<size_t>(window[i]) * d,
                      embed.begin() + static_cast<size_t>(window[i] + 1) * d);
    positions.push_back(static_cast<int>(i) + 1);
  }
  NaiveOutput all = NaiveForward(m, rows, positions, [&](int i, int j) {
    if (i < num_mem) return j < num_mem;  // memory: bidirectional among memory only
    return j < num_mem || j <= i;         // window: all memory + causal
  });
  all.logits.erase(all.logits.begin(), all.logits.begin() + num_mem);
  all.hidden.erase(all.hidden.begin(), all.hidden.begin() + num_mem);
  return all;
}

}  // namespace kvfold::memory::testing

#endif  // KVFOLD_TESTS_INFERENCE_SVC_MEMORY_TINY_MODEL_H_
