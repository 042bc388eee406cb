// `kvfold info --model PATH [--json]`: config and fingerprint of a model (HF directory,
// GGUF file or llama2.c checkpoint). The fingerprint is what projectors and memory blocks record.
#include <cstdio>
#include <memory>

#include "common/command_line.h"
#include "inference_svc/model/model_file.h"
#include "nlohmann/json.hpp"
#include "tools/kvfold/cli_engine.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

struct InfoFlags {
  std::string model;
  bool json = false;
};

int RunInfo(const InfoFlags& flags) {
  absl::StatusOr<model::ModelFile> m = model::LoadModel(flags.model);
  if (!m.ok()) return FailWith("info", m.status());
  const model::ModelConfig& c = m->config;
  size_t bytes = 0;
  int64_t params = 0;
  for (const auto& [name, t] : m->tensors) {
    bytes += t.size_bytes;
    params += t.numel();
  }
  nlohmann::json j;
  j["model_fingerprint"] = model::Fingerprint(*m);
  j["source_format"] = m->source_format;
  j["architecture"] = c.architecture;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_layers"] = c.num_layers;
  j["num_heads"] = c.num_heads;
  j["num_kv_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = model::RopeScalingName(c.rope_scaling);
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["qkv_bias"] = c.qkv_bias;
  j["sliding_window"] = c.sliding_window;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_ids"] = c.eos_token_ids;
  j["num_parameters"] = params;
  j["weight_bytes"] = bytes;
  j["kv_bytes_per_token_f32"] = int64_t{c.num_layers} * 2 * c.kv_dim() * 4;
  // The config's strings need not be UTF-8: such bytes print as U+FFFD.
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  if (flags.json) {
    std::printf("%s\n", j.dump(2, ' ', false, kReplace).c_str());
  } else {
    for (const auto& [k, v] : j.items()) {
      std::printf("%-26s %s\n", k.c_str(), v.dump(-1, ' ', false, kReplace).c_str());
    }
  }
  return 0;
}

RunFn SetupInfo(CLI::App& app) {
  auto flags = std::make_shared<InfoFlags>();
  app.footer("Prints the model's config and fingerprint (sha256 over config + tensors).");
  app.add_option("--model", flags->model, "HF directory, GGUF file or llama2.c checkpoint")
      ->required();
  AddSwitch(app, "--json", flags->json, "JSON instead of text");
  return [flags] { return RunInfo(*flags); };
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(info, "model config and fingerprint", kvfold::cli::SetupInfo);
