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
  // The engine runs "LlamaForCausalLM", "MistralForCausalLM" and "Qwen2ForCausalLM";
  // ReadHfConfig keeps whatever the file names (empty when it names none).
  std::string architecture = "LlamaForCausalLM";
  std::string model_type;  // config.json's model_type, as written (may be empty)
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
  bool o_bias = false;        // attention_bias: o_proj carries one too
  int sliding_window = 0;     // Mistral: 0 = none (informational; modes are per session)

  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_factor = 1.0f;                  // linear, dynamic, llama3
  float rope_low_freq_factor = 1.0f;         // llama3
  float rope_high_freq_factor = 4.0f;        // llama3
  int rope_original_max_position = 8192;     // llama3, dynamic
  std::string unsupported_rope_type;         // a rope_scaling type the engine lacks

  int bos_token_id = 1;
  std::vector<int> eos_token_ids = {2};

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }

  // InvalidArgument naming the first bad field (sizes, norms, rope, token ids).
  absl::Status ValidateShapes() const;
  // ValidateShapes, and Unimplemented unless the engine runs the architecture and rope.
  absl::Status CheckSupported() const;

  // The canonical, order-fixed text that the fingerprint hashes (docs/model-format.md).
  std::string CanonicalString() const;
};

// The one reader of an HF config.json (the loader and the planner both use it;
// docs/model-format.md). Required positive integers: hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, vocab_size. Optional: num_key_value_heads
// (default num_attention_heads), head_dim (default hidden_size / num_attention_heads, which
// must then divide evenly), sliding_window (null or absent = none; ignored when
// use_sliding_window is false, as Qwen2 writes), max_position_embeddings, rms_norm_eps,
// rope_theta, rope_scaling, tie_word_embeddings, attention_bias, bos/eos token ids,
// architectures / model_type ("qwen2" implies q/k/v biases). InvalidArgument naming the
// field on malformed JSON, a missing field, a wrong type, a fraction, a size out of range,
// or num_attention_heads not a multiple of num_key_value_heads. It does not check that the
// engine runs the architecture or the rope type (CheckSupported does).
absl::StatusOr<ModelConfig> ReadHfConfig(std::string_view json_text);

// ReadHfConfig, then CheckSupported (what loading a model needs): also Unimplemented for an
// architecture or a rope_scaling type the engine does not run.
absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view json_text);

// Serialises to an HF config.json (what `kvfold convert` and make_random_model write).
std::string ToHfConfigJson(const ModelConfig& config, std::string_view torch_dtype);

// inv_freq[i] for i < head_dim/2 after rope scaling (llama3/linear; dynamic uses
// `context_len` when it exceeds max_position_embeddings, like HF).
std::vector<float> RopeInvFreq(const ModelConfig& config, int64_t context_len);

}  // namespace kvfold::model

#endif  // KVFOLD_INFERENCE_SVC_MODEL_CONFIG_H_
