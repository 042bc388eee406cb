// make_random_model: writes an HF model directory (config.json + model.safetensors) with
// random weights of a named shape, deterministic by seed (each tensor seeded from the
// seed and its name). Used by tests (PyTorch parity, engine tests) and benchmarks.
//
//   make_random_model --shape NAME --out DIR [--seed N] [--dtype f32|f16|bf16]
//     [--tie-embeddings|--no-tie-embeddings] [--qkv-bias]
//     [--rope-scaling none|llama3|linear|dynamic] [--vocab-size N] [--max-position N]
//     [--layers N]
// Shapes: llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, tiny, tiny-qwen2, tiny-mha, tiny-odd.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/fp16.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/model/config.h"
#include "inference_svc/model/model_file.h"
#include "nlohmann/json.hpp"

namespace {

using kvfold::model::ModelConfig;
using kvfold::model::RopeScaling;

bool ShapeConfig(const std::string& name, ModelConfig* c) {
  *c = ModelConfig();
  auto tiny = [&] {
    c->hidden_size = 64;
    c->intermediate_size = 160;
    c->num_layers = 2;
    c->num_heads = 4;
    c->num_kv_heads = 2;
    c->head_dim = 16;
    c->vocab_size = 256;
    c->max_position_embeddings = 1024;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->bos_token_id = 1;
    c->eos_token_ids = {2};
  };
  if (name == "llama-3.2-1b" || name == "llama-3.1-8b") {
    const bool big = name == "llama-3.1-8b";
    c->hidden_size = big ? 4096 : 2048;
    c->intermediate_size = big ? 14336 : 8192;
    c->num_layers = big ? 32 : 16;
    c->num_heads = 32;
    c->num_kv_heads = 8;
    c->head_dim = big ? 128 : 64;
    c->vocab_size = 128256;
    c->max_position_embeddings = 131072;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 500000.0f;
    c->tie_word_embeddings = !big;
    c->rope_scaling = RopeScaling::kLlama3;
    c->rope_factor = big ? 8.0f : 32.0f;
    c->rope_low_freq_factor = 1.0f;
    c->rope_high_freq_factor = 4.0f;
    c->rope_original_max_position = 8192;
    c->bos_token_id = 128000;
    c->eos_token_ids = {128001, 128008, 128009};
  } else if (name == "qwen2.5-0.5b") {
    c->architecture = "Qwen2ForCausalLM";
    c->hidden_size = 896;
    c->intermediate_size = 4864;
    c->num_layers = 24;
    c->num_heads = 14;
    c->num_kv_heads = 2;
    c->head_dim = 64;
    c->vocab_size = 151936;
    c->max_position_embeddings = 32768;
    c->rms_norm_eps = 1e-6f;
    c->rope_theta = 1000000.0f;
    c->tie_word_embeddings = true;
    c->qkv_bias = true;
    c->bos_token_id = 151643;
    c->eos_token_ids = {151645};
  } else if (name == "tiny") {
    tiny();
  } else if (name == "tiny-qwen2") {
    tiny();
    c->architecture = "Qwen2ForCausalLM";
    c->qkv_bias = true;
    c->rms_norm_eps = 1e-6f;
  } else if (name == "tiny-mha") {
    tiny();
    c->num_kv_heads = 4;
  } else if (name == "tiny-odd") {
    tiny();
    c->hidden_size = 72;
    c->num_heads = 6;
    c->num_kv_heads = 2;
    c->head_dim = 12;
    c->intermediate_size = 200;
    c->vocab_size = 263;
    c->num_layers = 3;
  } else {
    return false;
  }
  return true;
}

uint64_t HashName(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

struct Spec {
  std::vector<int64_t> shape;
  int kind;  // 0 matrix (std 1/sqrt(fan_in)), 1 norm (1 + U(-0.1, 0.1)), 2 bias, 3 embedding
};

int Usage() {
  std::fprintf(stderr,
               "usage: make_random_model --shape NAME --out DIR [--seed N] [--dtype f32|f16|bf16]\n"
               "  [--tie-embeddings|--no-tie-embeddings] [--qkv-bias]\n"
               "  [--rope-scaling none|llama3|linear|dynamic] [--vocab-size N] [--max-position N]\n"
               "  [--layers N]\n"
               "shapes: llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, tiny, tiny-qwen2, tiny-mha, tiny-odd\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tie-embeddings" || a == "--no-tie-embeddings" || a == "--qkv-bias") {
      f[a.substr(2)] = "1";
    } else if (a.rfind("--", 0) == 0 && i + 1 < argc) {
      f[a.substr(2)] = argv[++i];
    } else {
      return Usage();
    }
  }
  if (!f.count("shape") || !f.count("out")) return Usage();
  ModelConfig c;
  if (!ShapeConfig(f["shape"], &c)) {
    std::fprintf(stderr, "make_random_model: unknown shape '%s'\n", f["shape"].c_str());
    return Usage();
  }
  uint64_t seed = 0;
  int64_t v = 0;
  if (f.count("seed") && !absl::SimpleAtoi(f["seed"], &seed)) return Usage();
  if (f.count("tie-embeddings")) c.tie_word_embeddings = true;
  if (f.count("no-tie-embeddings")) c.tie_word_embeddings = false;
  if (f.count("qkv-bias")) c.qkv_bias = true;
  if (f.count("vocab-size")) {
    if (!absl::SimpleAtoi(f["vocab-size"], &v) || v < 3) return Usage();
    c.vocab_size = static_cast<int>(v);
  }
  if (f.count("max-position")) {
    if (!absl::SimpleAtoi(f["max-position"], &v) || v < 1) return Usage();
    c.max_position_embeddings = static_cast<int>(v);
  }
  if (f.count("layers")) {
    if (!absl::SimpleAtoi(f["layers"], &v) || v < 1) return Usage();
    c.num_layers = static_cast<int>(v);
  }
  if (f.count("rope-scaling")) {
    const std::string r = f["rope-scaling"];
    if (r == "none") {
      c.rope_scaling = RopeScaling::kNone;
    } else if (r == "llama3") {
      c.rope_scaling = RopeScaling::kLlama3;
      if (c.rope_factor == 1.0f) c.rope_factor = 8.0f;
      // Small models: keep the llama3 frequency bands inside the short test contexts.
      if (c.hidden_size < 1024) c.rope_original_max_position = 64;
    } else if (r == "linear" || r == "dynamic") {
      c.rope_scaling = r == "linear" ? RopeScaling::kLinear : RopeScaling::kDynamic;
      c.rope_factor = 2.0f;
    } else {
      return Usage();
    }
  }
  if (c.bos_token_id >= c.vocab_size) c.bos_token_id = 1;
  for (int& e : c.eos_token_ids)
    if (e >= c.vocab_size) e = 2;
  if (absl::Status s = c.Validate(); !s.ok()) {
    std::fprintf(stderr, "make_random_model: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const std::string dtype = f.count("dtype") ? f["dtype"] : "f32";
  if (dtype != "f32" && dtype != "f16" && dtype != "bf16") return Usage();
  const size_t esize = dtype == "f32" ? 4 : 2;

  // Tensor list (HF names, sorted).
  std::map<std::string, Spec> specs;
  const int64_t d = c.hidden_size, ff = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  specs["model.embed_tokens.weight"] = {{c.vocab_size, d}, 3};
  specs["model.norm.weight"] = {{d}, 1};
  if (!c.tie_word_embeddings) specs["lm_head.weight"] = {{c.vocab_size, d}, 0};
  for (int l = 0; l < c.num_layers; ++l) {
    using kvfold::model::LayerTensorName;
    specs[LayerTensorName(l, "input_layernorm.weight")] = {{d}, 1};
    specs[LayerTensorName(l, "post_attention_layernorm.weight")] = {{d}, 1};
    specs[LayerTensorName(l, "self_attn.q_proj.weight")] = {{q, d}, 0};
    specs[LayerTensorName(l, "self_attn.k_proj.weight")] = {{kv, d}, 0};
    specs[LayerTensorName(l, "self_attn.v_proj.weight")] = {{kv, d}, 0};
    specs[LayerTensorName(l, "self_attn.o_proj.weight")] = {{d, q}, 0};
    specs[LayerTensorName(l, "mlp.gate_proj.weight")] = {{ff, d}, 0};
    specs[LayerTensorName(l, "mlp.up_proj.weight")] = {{ff, d}, 0};
    specs[LayerTensorName(l, "mlp.down_proj.weight")] = {{d, ff}, 0};
    if (c.qkv_bias) {
      specs[LayerTensorName(l, "self_attn.q_proj.bias")] = {{q}, 2};
      specs[LayerTensorName(l, "self_attn.k_proj.bias")] = {{kv}, 2};
      specs[LayerTensorName(l, "self_attn.v_proj.bias")] = {{kv}, 2};
    }
  }
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  const char* st_dtype = dtype == "f32" ? "F32" : dtype == "f16" ? "F16" : "BF16";
  for (const auto& [name, s] : specs) {
    int64_t n = 1;
    for (int64_t x : s.shape) n *= x;
    header[name] = {{"dtype", st_dtype}, {"shape", s.shape}, {"data_offsets", {offset, offset + n * esize}}};
    offset += n * esize;
  }
  header["__metadata__"] = {{"format", "pt"}, {"generator", "kvfold make_random_model"}};
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');

  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path out_dir = f.at("out");
  fs::create_directories(out_dir, ec);
  std::ofstream out(out_dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  std::vector<char> buf;
  for (const auto& [name, s] : specs) {
    int64_t n = 1;
    for (int64_t x : s.shape) n *= x;
    kvfold::engine::Rng rng(HashName(seed, name));
    const double fan_in = static_cast<double>(s.shape.back());
    const double scale = s.kind == 0 ? std::sqrt(3.0 / fan_in) : s.kind == 3 ? std::sqrt(3.0) : 0.1;
    buf.resize(static_cast<size_t>(n) * esize);
    for (int64_t i = 0; i < n; ++i) {
      float x = static_cast<float>((2.0 * rng.Uniform() - 1.0) * scale);
      if (s.kind == 1) x += 1.0f;
      if (esize == 4) {
        std::memcpy(buf.data() + i * 4, &x, 4);
      } else {
        const uint16_t b = dtype == "f16" ? kvfold::Fp32ToFp16(x) : kvfold::Fp32ToBf16(x);
        std::memcpy(buf.data() + i * 2, &b, 2);
      }
    }
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  if (!out) {
    std::fprintf(stderr, "make_random_model: cannot write %s/model.safetensors\n", f["out"].c_str());
    return 1;
  }
  std::ofstream cfg(out_dir / "config.json", std::ios::trunc);
  cfg << kvfold::model::ToHfConfigJson(c, dtype);
  if (!cfg) return 1;
  std::printf("wrote %s (%s, %s, %.1f MB)\n", f["out"].c_str(), f["shape"].c_str(), dtype.c_str(),
              offset / 1e6);
  return 0;
}
