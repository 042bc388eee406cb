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
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/command_line.h"
#include "inference_svc/model/config.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/random_model.h"
#include "nlohmann/json.hpp"

namespace {

using kvfold::model::ModelConfig;
using kvfold::model::RopeScaling;

// The command line (docs/cli.md). 0 / empty = the shape's value.
struct Flags {
  std::string shape;
  std::string out;
  uint64_t seed = 0;
  std::string dtype = "f32";
  bool tie_embeddings = false;
  bool no_tie_embeddings = false;
  bool qkv_bias = false;
  std::string rope_scaling;
  int vocab_size = 0;
  int max_position = 0;
  int layers = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Writes an HF model directory with random weights of a named shape "
      "(llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, tiny, tiny-qwen2, tiny-mha, "
      "tiny-odd), deterministic by seed.",
      "make_random_model"};
  kvfold::ApplyConvention(app);
  Flags f;
  app.add_option("--shape", f.shape, "named shape")->required();
  app.add_option("--out", f.out, "output directory")->required();
  app.add_option("--seed", f.seed, "RNG seed");
  app.add_option("--dtype", f.dtype, "weight dtype")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  CLI::Option* tie = kvfold::AddSwitch(app, "--tie-embeddings", f.tie_embeddings,
                                       "tie the output and input embeddings (default: the "
                                       "shape's)");
  kvfold::AddSwitch(app, "--no-tie-embeddings", f.no_tie_embeddings,
                    "separate output and input embeddings (default: the shape's)")
      ->excludes(tie);
  kvfold::AddSwitch(app, "--qkv-bias", f.qkv_bias, "add q/k/v projection biases");
  app.add_option("--rope-scaling", f.rope_scaling, "RoPE scaling (default: the shape's)")
      ->check(CLI::IsMember({"none", "llama3", "linear", "dynamic"}));
  app.add_option("--vocab-size", f.vocab_size, "vocabulary size (0 = the shape's)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--max-position", f.max_position, "max_position_embeddings (0 = the shape's)")
      ->check(kvfold::NonNegative());
  app.add_option("--layers", f.layers, "layers (0 = the shape's)")->check(kvfold::NonNegative());
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  absl::StatusOr<ModelConfig> shape = kvfold::model::NamedShape(f.shape);
  if (!shape.ok()) {
    std::fprintf(stderr, "make_random_model: %s\n", std::string(shape.status().message()).c_str());
    return kvfold::kExitUsage;
  }
  ModelConfig c = *shape;
  const uint64_t seed = f.seed;
  if (f.tie_embeddings) c.tie_word_embeddings = true;
  if (f.no_tie_embeddings) c.tie_word_embeddings = false;
  if (f.qkv_bias) c.qkv_bias = true;
  if (f.vocab_size > 0) {
    if (f.vocab_size < 3) {
      std::fprintf(stderr, "make_random_model: --vocab-size must be >= 3\n");
      return kvfold::kExitUsage;
    }
    c.vocab_size = f.vocab_size;
  }
  if (f.max_position > 0) c.max_position_embeddings = f.max_position;
  if (f.layers > 0) c.num_layers = f.layers;
  if (!f.rope_scaling.empty()) {
    const std::string& r = f.rope_scaling;
    if (r == "none") {
      c.rope_scaling = RopeScaling::kNone;
    } else if (r == "llama3") {
      c.rope_scaling = RopeScaling::kLlama3;
      if (c.rope_factor == 1.0f) c.rope_factor = 8.0f;
      // Small models: keep the llama3 frequency bands inside the short test contexts.
      if (c.hidden_size < 1024) c.rope_original_max_position = 64;
    } else {
      c.rope_scaling = r == "linear" ? RopeScaling::kLinear : RopeScaling::kDynamic;
      c.rope_factor = 2.0f;
    }
  }
  if (c.bos_token_id >= c.vocab_size) c.bos_token_id = 1;
  for (int& e : c.eos_token_ids)
    if (e >= c.vocab_size) e = 2;
  if (absl::Status s = c.CheckSupported(); !s.ok()) {
    std::fprintf(stderr, "make_random_model: %s\n", std::string(s.message()).c_str());
    return kvfold::kExitUsage;
  }
  const std::string dtype = f.dtype;
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
  const fs::path out_dir = f.out;
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
    std::fprintf(stderr, "make_random_model: cannot write %s/model.safetensors\n", f.out.c_str());
    return 1;
  }
  std::ofstream cfg(out_dir / "config.json", std::ios::trunc);
  cfg << kvfold::model::ToHfConfigJson(c, dtype);
  if (!cfg) return 1;
  std::printf("wrote %s (%s, %s, %.1f MB)\n", f.out.c_str(), f.shape.c_str(), dtype.c_str(),
              offset / 1e6);
  return 0;
}
