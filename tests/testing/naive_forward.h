// An independent, deliberately naive transformer forward for tests: scalar loops in
// double, every row's attention given explicitly as (key row, key position) pairs. It
// shares nothing with the engine but the HF tensor names.
#ifndef KVFOLD_TESTS_TESTING_NAIVE_FORWARD_H_
#define KVFOLD_TESTS_TESTING_NAIVE_FORWARD_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "inference_svc/model/model_file.h"

namespace kvfold::testing {

struct NaiveRow {
  std::vector<float> embedding;            // [hidden_size]
  int query_position = 0;
  std::vector<std::pair<int, int>> keys;   // (row index, position) this row attends to
};

struct NaiveOutput {
  std::vector<std::vector<double>> logits;  // per row [vocab]
  std::vector<std::vector<double>> hidden;  // per row: last layer output before the norm
};

inline std::vector<double> NaiveTensor(const model::ModelFile& m, const std::string& name) {
  const model::HostTensor& t = m.tensors.at(name);
  std::vector<double> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<const float*>(t.data)[i];
  return out;
}

inline std::vector<float> NaiveEmbedding(const model::ModelFile& m, int id) {
  const model::HostTensor& t = m.tensors.at("model.embed_tokens.weight");
  const int d = m.config.hidden_size;
  const float* p = static_cast<const float*>(t.data) + static_cast<size_t>(id) * d;
  return std::vector<float>(p, p + d);
}

inline NaiveOutput NaiveForward(const model::ModelFile& m, const std::vector<NaiveRow>& rows) {
  const model::ModelConfig& c = m.config;
  const int d = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
  const int f = c.intermediate_size, n = static_cast<int>(rows.size());
  auto matvec = [](const std::vector<double>& w, const std::vector<double>& x, int out_dim) {
    const int in_dim = static_cast<int>(x.size());
    std::vector<double> y(out_dim, 0.0);
    for (int o = 0; o < out_dim; ++o)
      for (int i = 0; i < in_dim; ++i) y[o] += w[static_cast<size_t>(o) * in_dim + i] * x[i];
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<double>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + c.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
    return y;
  };
  auto rotate = [&](const double* x, int pos, double* out) {
    const int half = hd / 2;
    for (int i = 0; i < half; ++i) {
      const double inv_freq = 1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * i / hd);
      const double a = pos * inv_freq;
      out[i] = x[i] * std::cos(a) - x[half + i] * std::sin(a);
      out[half + i] = x[half + i] * std::cos(a) + x[i] * std::sin(a);
    }
  };
  std::vector<std::vector<double>> x(n);
  for (int r = 0; r < n; ++r) x[r].assign(rows[r].embedding.begin(), rows[r].embedding.end());
  for (int l = 0; l < c.num_layers; ++l) {
    auto T = [&](const char* s) { return NaiveTensor(m, model::LayerTensorName(l, s)); };
    const auto wq = T("self_attn.q_proj.weight"), wk = T("self_attn.k_proj.weight");
    const auto wv = T("self_attn.v_proj.weight"), wo = T("self_attn.o_proj.weight");
    const auto an = T("input_layernorm.weight"), fn = T("post_attention_layernorm.weight");
    const auto wg = T("mlp.gate_proj.weight"), wu = T("mlp.up_proj.weight");
    const auto wd = T("mlp.down_proj.weight");
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int r = 0; r < n; ++r) {
      const auto h = rmsnorm(x[r], an);
      q[r] = matvec(wq, h, nh * hd);
      k[r] = matvec(wk, h, nkv * hd);
      v[r] = matvec(wv, h, nkv * hd);
      if (c.qkv_bias) {
        const auto bq = T("self_attn.q_proj.bias"), bk = T("self_attn.k_proj.bias");
        const auto bv = T("self_attn.v_proj.bias");
        for (int i = 0; i < nh * hd; ++i) q[r][i] += bq[i];
        for (int i = 0; i < nkv * hd; ++i) k[r][i] += bk[i], v[r][i] += bv[i];
      }
    }
    std::vector<std::vector<double>> next(n);
    for (int r = 0; r < n; ++r) {
      std::vector<double> att(nh * hd, 0.0);
      for (int h = 0; h < nh; ++h) {
        const int kvh = h / (nh / nkv);
        std::vector<double> qr(hd), kr(hd);
        rotate(&q[r][h * hd], rows[r].query_position, qr.data());
        std::vector<double> scores;
        for (auto [kr_row, kpos] : rows[r].keys) {
          rotate(&k[kr_row][kvh * hd], kpos, kr.data());
          double s = 0;
          for (int i = 0; i < hd; ++i) s += qr[i] * kr[i];
          scores.push_back(s / std::sqrt(static_cast<double>(hd)));
        }
        double mx = -1e300, sum = 0;
        for (double s : scores) mx = std::max(mx, s);
        for (double& s : scores) sum += (s = std::exp(s - mx));
        for (size_t j = 0; j < scores.size(); ++j)
          for (int i = 0; i < hd; ++i)
            att[h * hd + i] += scores[j] / sum * v[rows[r].keys[j].first][kvh * hd + i];
      }
      next[r] = x[r];
      const auto o = matvec(wo, att, d);
      for (int i = 0; i < d; ++i) next[r][i] += o[i];
      const auto h2 = rmsnorm(next[r], fn);
      const auto g = matvec(wg, h2, f), u = matvec(wu, h2, f);
      std::vector<double> a(f);
      for (int i = 0; i < f; ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const auto dn = matvec(wd, a, d);
      for (int i = 0; i < d; ++i) next[r][i] += dn[i];
    }
    x = std::move(next);
  }
  NaiveOutput out;
  const auto norm = NaiveTensor(m, "model.norm.weight");
  const auto head = NaiveTensor(m, c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  for (int r = 0; r < n; ++r) {
    out.hidden.push_back(x[r]);
    out.logits.push_back(matvec(head, rmsnorm(x[r], norm), c.vocab_size));
  }
  return out;
}

// Rows from explicit inputs: row i is x[i] at positions[i] and attends to every row j with
// visible(i, j), each key at its own position.
template <typename Visible>
std::vector<NaiveRow> NaiveRowsFromMask(const std::vector<std::vector<float>>& x,
                                        const std::vector<int>& positions, Visible visible) {
  const int n = static_cast<int>(x.size());
  std::vector<NaiveRow> rows(n);
  for (int i = 0; i < n; ++i) {
    rows[i].embedding = x[i];
    rows[i].query_position = positions[i];
    for (int j = 0; j < n; ++j)
      if (visible(i, j)) rows[i].keys.push_back({j, positions[j]});
  }
  return rows;
}

// Memory-mode inputs (docs/contracts.md): the M memory rows at position 0, bidirectional
// among themselves and attending to nothing else, then window token i at position i + 1,
// seeing all of memory and window tokens 0..i.
inline std::vector<std::vector<float>> NaiveMemoryInputs(const model::ModelFile& m,
                                                         const std::vector<float>& mem,
                                                         const std::vector<int32_t>& window,
                                                         std::vector<int>* positions) {
  const int d = m.config.hidden_size, num_mem = static_cast<int>(mem.size()) / d;
  std::vector<std::vector<float>> x;
  positions->clear();
  for (int s = 0; s < num_mem; ++s) {
    x.emplace_back(mem.begin() + s * d, mem.begin() + (s + 1) * d);
    positions->push_back(0);
  }
  for (size_t i = 0; i < window.size(); ++i) {
    x.push_back(NaiveEmbedding(m, window[i]));
    positions->push_back(static_cast<int>(i) + 1);
  }
  return x;
}

// The memory-mode forward; logits and hidden states of the window rows only.
inline NaiveOutput NaiveMemoryForward(const model::ModelFile& m, const std::vector<float>& mem,
                                      const std::vector<int32_t>& window) {
  const int num_mem = static_cast<int>(mem.size()) / m.config.hidden_size;
  std::vector<int> positions;
  const auto x = NaiveMemoryInputs(m, mem, window, &positions);
  NaiveOutput all = NaiveForward(m, NaiveRowsFromMask(x, positions, [&](int i, int j) {
    return i < num_mem ? j < num_mem : (j < num_mem || j <= i);
  }));
  all.logits.erase(all.logits.begin(), all.logits.begin() + num_mem);
  all.hidden.erase(all.hidden.begin(), all.hidden.begin() + num_mem);
  return all;
}

// Rows for a token sequence under each plain mode's position rule (docs/contracts.md).
inline std::vector<NaiveRow> NaiveRowsForMode(const model::ModelFile& m,
                                              const std::vector<int>& ids,
                                              const std::string& mode, int window, int sink) {
  std::vector<NaiveRow> rows;
  for (int t = 0; t < static_cast<int>(ids.size()); ++t) {
    NaiveRow row;
    row.embedding = NaiveEmbedding(m, ids[t]);
    if (mode == "full") {
      for (int j = 0; j <= t; ++j) row.keys.push_back({j, j});
      row.query_position = t;
    } else if (mode == "sliding") {
      const int lo = std::max(0, t - window + 1);
      for (int j = lo; j <= t; ++j) row.keys.push_back({j, j - lo});
      row.query_position = t - lo;
    } else {  // sink
      if (t < sink) {
        for (int j = 0; j <= t; ++j) row.keys.push_back({j, j});
        row.query_position = t;
      } else {
        for (int j = 0; j < sink; ++j) row.keys.push_back({j, j});
        const int mi = t - sink, lo = std::max(0, mi - window + 1);
        for (int j = lo; j <= mi; ++j) row.keys.push_back({sink + j, sink + (j - lo)});
        row.query_position = sink + (mi - lo);
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_TESTING_NAIVE_FORWARD_H_
