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
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/fp16.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/memory/random_projector.h"
#include "inference_svc/model/model_file.h"

ABSL_FLAG(std::string, model, "", "model path (HF directory or llama2.c .bin)");
ABSL_FLAG(std::string, out, "", "output directory");
ABSL_FLAG(int, mem_slots, 16, "M: memory vectors");
ABSL_FLAG(int, window, 64, "W: window tokens kept after a fold");
ABSL_FLAG(int, chunk, 32, "C: tokens folded per fold");
ABSL_FLAG(int, heads, 8, "attention heads (must divide hidden_size)");
ABSL_FLAG(int, ffn_mult, 4, "FFN width multiplier");
ABSL_FLAG(int, input_layers, 1, "1 = last layer's hidden states, 3 = last three via in_proj");
ABSL_FLAG(uint64_t, seed, 0, "RNG seed");
ABSL_FLAG(double, ln_eps, 1e-5, "LayerNorm epsilon");
ABSL_FLAG(std::string, window_policy, "growing",
          "memory mode's window between folds: growing (W..W + C) or sliding (last W)");

namespace {

using kvfold::model::DType;

std::vector<float> ToFloats(const kvfold::model::HostTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const auto* bytes = static_cast<const unsigned char*>(t.data);
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::kF32) {
      std::memcpy(&out[i], bytes + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      out[i] = t.dtype == DType::kF16 ? kvfold::Fp16ToFp32(h) : kvfold::Bf16ToFp32(h);
    }
  }
  return out;
}

// Accepts --flag-name as well as absl's --flag_name (the docs spell flags with dashes).
void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--", 2) != 0) continue;
    for (char* p = argv[i] + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const std::string model_path = absl::GetFlag(FLAGS_model);
  const std::string out_dir = absl::GetFlag(FLAGS_out);
  if (model_path.empty() || out_dir.empty()) {
    std::fprintf(stderr, "usage: make_random_projector --model PATH --out DIR [flags]\n");
    return 2;
  }
  auto model = kvfold::model::LoadModel(model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "make_random_projector: %s\n", std::string(model.status().message()).c_str());
    return model.status().code() == absl::StatusCode::kNotFound ? 1 : 2;
  }
  kvfold::memory::ProjectorConfig config;
  config.mem_slots = absl::GetFlag(FLAGS_mem_slots);
  config.hidden_size = model->config.hidden_size;
  config.num_heads = absl::GetFlag(FLAGS_heads);
  config.ffn_mult = absl::GetFlag(FLAGS_ffn_mult);
  config.chunk_size = absl::GetFlag(FLAGS_chunk);
  config.window_size = absl::GetFlag(FLAGS_window);
  config.input_layers = absl::GetFlag(FLAGS_input_layers);
  config.ln_eps = static_cast<float>(absl::GetFlag(FLAGS_ln_eps));
  const std::string policy = absl::GetFlag(FLAGS_window_policy);
  if (policy != "growing" && policy != "sliding") {
    std::fprintf(stderr, "make_random_projector: --window-policy must be growing or sliding\n");
    return 2;
  }
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
  const float embed_rms = kvfold::memory::RootMeanSquare(ToFloats(**embed));
  const auto tensors =
      kvfold::memory::RandomProjectorTensors(config, embed_rms, absl::GetFlag(FLAGS_seed));
  auto fingerprint = kvfold::memory::SaveProjector(out_dir, config, tensors);
  if (!fingerprint.ok()) {
    std::fprintf(stderr, "make_random_projector: %s\n", std::string(fingerprint.status().message()).c_str());
    return 1;
  }
  std::printf("{\"projector_fingerprint\": \"%s\", \"model_fingerprint\": \"%s\", \"embed_rms\": %.9g}\n",
              fingerprint->c_str(), config.model_fingerprint.c_str(), embed_rms);
  return 0;
}
