// ModelConfig: the architecture description of a Llama-family decoder, filled from an HF
// config.json or a llama2.c header, validated once, immutable afterwards.
#ifndef KVFOLD_INFERENCE_SVC_MODEL_CONFIG_H_
#define KVFOLD_INFERENCE_SVC_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvfold::model {

enum class RopeScaling { kNone, kLlama3, kLinear, kDynamic };
const char* RopeScalingName(RopeScaling scaling);  // "none", "llama3", "linear", "dynamic"

struct ModelConfig {
  // "LlamaForCausalLM", "MistralForCausalLM" or "Qwen2ForCausalLM".
  std::string architecture = "LlamaForCausalLM";
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // Default: hidden_size / num_heads
  int vocab_size = 0;
  int max_position_embeddings = 2048;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;      // Qwen2: q/k/v projections carry a bias
  int sliding_window = 0;     // Mistral: 0 = none (informational; modes are per session)

  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_factor = 1.0f;                  // linear, dynamic, llama3
  float rope_low_freq_factor = 1.0f;         // llama3
  float rope_high_freq_factor = 4.0f;        // llama3
  int rope_original_max_position = 8192;     // llama3, dynamic

  int bos_token_id = 1;
  std::vector<int> eos_token_ids = {2};

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }

  // InvalidArgument naming the first bad field.
  absl::Status Validate() const;

  // The canonical, order-fixed text that the fingerprint hashes (docs/model-format.md).
  std::string CanonicalString() const;
};

// Parses an HF config.json text. InvalidArgument on bad JSON or missing/invalid fields;
// Unimplemented for an unknown architecture or rope_scaling type.
absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view json_text);

// Serialises to an HF config.json (what `kvfold convert` and make_random_model write).
std::string ToHfConfigJson(const ModelConfig& config, std::string_view torch_dtype);

// inv_freq[i] for i < head_dim/2 after rope scaling (llama3/linear; dynamic uses
// `context_len` when it exceeds max_position_embeddings, like HF).
std::vector<float> RopeInvFreq(const ModelConfig& config, int64_t context_len);

}  // namespace kvfold::model

#endif  // KVFOLD_INFERENCE_SVC_MODEL_CONFIG_H_
