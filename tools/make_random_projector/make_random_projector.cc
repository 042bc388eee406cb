// make_random_projector --model PATH --out DIR [--mem-slots 16] [--window 64] [--chunk 32]
//   [--heads 8] [--ffn-mult 4] [--input-layers 1|3] [--seed N] [--ln-eps 1e-5]
//   [--window-policy growing|sliding]
//
// Writes DIR/projector.json + DIR/projector.safetensors: an untrained MemoryProjector for
// the model at PATH (HF directory or llama2.c checkpoint), bound to its fingerprint, with
// ln_out.weight set to the RMS of the model's token embeddings. Deterministic by seed.
// Prints {"projector_fingerprint": ..., "model_fingerprint": ..., "embed_rms": ...}.
// Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input.
#include <cstdio>
#include <string>
#include <vector>

#include "common/command_line.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/model/model_file.h"

namespace {

// The command line (docs/cli.md).
struct Flags {
  std::string model;
  std::string out;
  int mem_slots = 16;
  int window = 64;
  int chunk = 32;
  int heads = 8;
  int ffn_mult = 4;
  int input_layers = 1;
  uint64_t seed = 0;
  double ln_eps = 1e-5;
  std::string window_policy = "growing";
};

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model, "model path (HF directory, GGUF file or llama2.c .bin)")
      ->required();
  app.add_option("--out", f.out, "output directory")->required();
  app.add_option("--mem-slots", f.mem_slots, "M: memory vectors");
  app.add_option("--window", f.window, "W: window tokens kept after a fold");
  app.add_option("--chunk", f.chunk, "C: tokens folded per fold");
  app.add_option("--heads", f.heads, "attention heads (must divide hidden_size)");
  app.add_option("--ffn-mult", f.ffn_mult, "FFN width multiplier");
  app.add_option("--input-layers", f.input_layers,
                 "1 = last layer's hidden states, 3 = last three via in_proj");
  app.add_option("--seed", f.seed, "RNG seed");
  app.add_option("--ln-eps", f.ln_eps, "LayerNorm epsilon");
  app.add_option("--window-policy", f.window_policy,
                 "memory mode's window between folds: growing (W..W + C) or "
                 "sliding (last W)")
      ->check(CLI::IsMember({"growing", "sliding"}));
}

using kvfold::model::DType;

// The tensor's values as floats, whatever its dtype (F32, F16, BF16 or Q8 rows).
absl::StatusOr<std::vector<float>> ToFloats(const kvfold::model::HostTensor& t) {
  auto f32 = kvfold::model::ConvertHostTensor(t, DType::kF32);
  if (!f32.ok()) return f32.status();
  const auto* values = static_cast<const float*>(f32->data);
  return std::vector<float>(values, values + t.numel());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes an untrained MemoryProjector for a model (tests and benchmarks).",
               "make_random_projector"};
  kvfold::ApplyConvention(app);
  Flags flags;
  AddFlags(app, flags);
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  const std::string model_path = flags.model;
  const std::string out_dir = flags.out;
  auto model = kvfold::model::LoadModel(model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "make_random_projector: %s\n", std::string(model.status().message()).c_str());
    return model.status().code() == absl::StatusCode::kNotFound ? 1 : 2;
  }
  kvfold::memory::ProjectorConfig config;
  config.mem_slots = flags.mem_slots;
  config.hidden_size = model->config.hidden_size;
  config.num_heads = flags.heads;
  config.ffn_mult = flags.ffn_mult;
  config.chunk_size = flags.chunk;
  config.window_size = flags.window;
  config.input_layers = flags.input_layers;
  config.ln_eps = static_cast<float>(flags.ln_eps);
  const std::string policy = flags.window_policy;
  config.window_policy = policy == "sliding" ? kvfold::memory::WindowPolicy::kSliding
                                             : kvfold::memory::WindowPolicy::kGrowing;
  config.model_fingerprint = kvfold::model::Fingerprint(*model);
  // Validate through the same parser the loader uses.
  if (auto parsed = kvfold::memory::ParseProjectorConfig(kvfold::memory::ProjectorConfigJson(config));
      !parsed.ok()) {
    std::fprintf(stderr, "make_random_projector: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (config.input_layers > model->config.num_layers) {
    std::fprintf(stderr, "make_random_projector: --input-layers %d but the model has %d layers\n",
                 config.input_layers, model->config.num_layers);
    return 2;
  }
  auto embed = model->Get("model.embed_tokens.weight",
                          {model->config.vocab_size, model->config.hidden_size});
  if (!embed.ok()) {
    std::fprintf(stderr, "make_random_projector: %s\n", std::string(embed.status().message()).c_str());
    return 2;
  }
  auto embed_values = ToFloats(**embed);
  if (!embed_values.ok()) {
    std::fprintf(stderr, "make_random_projector: %s\n",
                 std::string(embed_values.status().message()).c_str());
    return 2;
  }
  const float embed_rms = kvfold::memory::RootMeanSquare(*embed_values);
  const auto tensors = kvfold::memory::RandomProjectorTensors(config, embed_rms, flags.seed);
  auto fingerprint = kvfold::memory::SaveProjector(out_dir, config, tensors);
  if (!fingerprint.ok()) {
    std::fprintf(stderr, "make_random_projector: %s\n", std::string(fingerprint.status().message()).c_str());
    return 1;
  }
  std::printf("{\"projector_fingerprint\": \"%s\", \"model_fingerprint\": \"%s\", \"embed_rms\": %.9g}\n",
              fingerprint->c_str(), config.model_fingerprint.c_str(), embed_rms);
  return 0;
}
