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
#include "inference_svc/model/config.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/random_model.h"
#include "nlohmann/json.hpp"

namespace {

using kvfold::model::ModelConfig;
using kvfold::model::RopeScaling;

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
  absl::StatusOr<ModelConfig> shape = kvfold::model::NamedShape(f["shape"]);
  if (!shape.ok()) {
    std::fprintf(stderr, "make_random_model: %s\n", std::string(shape.status().message()).c_str());
    return Usage();
  }
  ModelConfig c = *shape;
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

  const auto specs = kvfold::model::TensorSpecs(c);
  const kvfold::model::DType dt = dtype == "f32"   ? kvfold::model::DType::kF32
                                  : dtype == "f16" ? kvfold::model::DType::kF16
                                                   : kvfold::model::DType::kBF16;
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
    buf.resize(static_cast<size_t>(n) * esize);
    kvfold::model::FillRandomTensor(name, s, seed, dt, buf.data());
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
