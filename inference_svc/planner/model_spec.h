// The model description the planner works from: the attention and MLP shapes of a
// decoder-only transformer, read from an HF config.json or taken from a built-in preset.
#ifndef KVFOLD_INFERENCE_SVC_PLANNER_MODEL_SPEC_H_
#define KVFOLD_INFERENCE_SVC_PLANNER_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference_svc/model/config.h"

namespace kvfold::planner {

struct ModelSpec {
  std::string name;           // preset name, or the config's name / model_type
  uint64_t hidden_size = 0;   // d
  uint64_t num_layers = 0;    // L (num_hidden_layers)
  uint64_t num_heads = 0;     // query heads (num_attention_heads)
  uint64_t num_kv_heads = 0;  // Hkv: == num_heads (MHA), 1 (MQA), in between (GQA)
  uint64_t head_dim = 0;      // D; HF default hidden_size / num_heads
  uint64_t vocab_size = 0;
  uint64_t intermediate_size = 0;  // MLP width (gate/up/down, SwiGLU)
  // The model's own attention window (Mistral v0.1: 4096); 0 = full attention. Caps the
  // resident main segment in every mode: the model never attends further back.
  uint64_t sliding_window = 0;
  uint64_t max_position_embeddings = 0;  // 0 = unknown
  bool tie_word_embeddings = false;      // lm_head shares the embedding matrix
  bool qkv_bias = false;                 // Qwen2: biases on q/k/v projections
  bool o_bias = false;                   // Llama attention_bias=true: also on o_proj
  std::string source;                    // where the numbers come from (presets: the HF repo)
};

// The built-in presets, in a stable order: llama-3.1-8b, llama-2-7b, mistral-7b-v0.1,
// qwen2.5-7b, qwen2.5-0.5b, llama-3.2-1b, stories260K. Values are those of the public
// config.json files (stories260K: the llama2.c checkpoint header).
const std::vector<ModelSpec>& Presets();

// The preset named `name` (case-insensitive). NotFound listing the known names otherwise.
absl::StatusOr<ModelSpec> FindPreset(absl::string_view name);

// The shapes of a model config (the loader's ModelConfig) as the planner counts them.
// `name` names the model in the output (empty: the config's model_type, else "config").
ModelSpec SpecFromModelConfig(const model::ModelConfig& config, absl::string_view name = "");

// Reads an HF config.json with the one reader, model::ReadHfConfig (its rules and errors:
// InvalidArgument naming the field), then SpecFromModelConfig. Any architecture is read:
// planning needs only the shapes.
absl::StatusOr<ModelSpec> ParseHfConfig(absl::string_view config_json, absl::string_view name = "");

// Checks the invariants ParseHfConfig enforces (for hand-built specs). InvalidArgument.
absl::Status ValidateModelSpec(const ModelSpec& spec);

// Parameter count computed from the shapes: embeddings, lm_head (unless tied), per layer
// q/k/v/o (+ biases), SwiGLU gate/up/down, two RMSNorm weights, and the final norm.
// InvalidArgument on overflow.
absl::StatusOr<uint64_t> ParameterCount(const ModelSpec& spec);

}  // namespace kvfold::planner

#endif  // KVFOLD_INFERENCE_SVC_PLANNER_MODEL_SPEC_H_
