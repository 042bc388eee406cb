#include "inference_svc/planner/model_spec.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "inference_svc/planner/checked_math.h"

namespace kvfold::planner {
namespace {

ModelSpec MakePreset(std::string name, uint64_t hidden_size, uint64_t num_layers,
                     uint64_t num_heads, uint64_t num_kv_heads, uint64_t head_dim,
                     uint64_t vocab_size, uint64_t intermediate_size, uint64_t sliding_window,
                     uint64_t max_position, bool tie, bool qkv_bias, std::string source) {
  ModelSpec s;
  s.name = std::move(name);
  s.hidden_size = hidden_size;
  s.num_layers = num_layers;
  s.num_heads = num_heads;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.vocab_size = vocab_size;
  s.intermediate_size = intermediate_size;
  s.sliding_window = sliding_window;
  s.max_position_embeddings = max_position;
  s.tie_word_embeddings = tie;
  s.qkv_bias = qkv_bias;
  s.source = std::move(source);
  return s;
}

}  // namespace

const std::vector<ModelSpec>& Presets() {
  static const std::vector<ModelSpec>* presets = new std::vector<ModelSpec>{
      MakePreset("llama-3.1-8b", 4096, 32, 32, 8, 128, 128256, 14336, 0, 131072, false, false,
                 "meta-llama/Llama-3.1-8B config.json"),
      MakePreset("llama-2-7b", 4096, 32, 32, 32, 128, 32000, 11008, 0, 4096, false, false,
                 "meta-llama/Llama-2-7b-hf config.json"),
      MakePreset("mistral-7b-v0.1", 4096, 32, 32, 8, 128, 32000, 14336, 4096, 32768, false, false,
                 "mistralai/Mistral-7B-v0.1 config.json"),
      MakePreset("qwen2.5-7b", 3584, 28, 28, 4, 128, 152064, 18944, 0, 131072, false, true,
                 "Qwen/Qwen2.5-7B config.json (use_sliding_window: false)"),
      MakePreset("qwen2.5-0.5b", 896, 24, 14, 2, 64, 151936, 4864, 0, 32768, true, true,
                 "Qwen/Qwen2.5-0.5B config.json (use_sliding_window: false)"),
      MakePreset("llama-3.2-1b", 2048, 16, 32, 8, 64, 128256, 8192, 0, 131072, true, false,
                 "meta-llama/Llama-3.2-1B config.json"),
      MakePreset("stories260K", 64, 5, 8, 4, 8, 512, 172, 0, 512, true, false,
                 "karpathy/tinyllamas stories260K.bin header (dim 64, hidden 172, 5 layers, "
                 "8 heads, 4 kv heads, vocab 512, seq 512; shared classifier)"),
  };
  return *presets;
}

absl::StatusOr<ModelSpec> FindPreset(absl::string_view name) {
  std::vector<std::string> names;
  for (const ModelSpec& p : Presets()) {
    if (absl::AsciiStrToLower(p.name) == absl::AsciiStrToLower(name)) return p;
    names.push_back(p.name);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown preset '", name, "'; known presets: ", absl::StrJoin(names, ", ")));
}

absl::Status ValidateModelSpec(const ModelSpec& s) {
  const std::pair<const char*, uint64_t> required[] = {{"hidden_size", s.hidden_size},
                                                       {"num_hidden_layers", s.num_layers},
                                                       {"num_attention_heads", s.num_heads},
                                                       {"num_key_value_heads", s.num_kv_heads},
                                                       {"head_dim", s.head_dim},
                                                       {"vocab_size", s.vocab_size},
                                                       {"intermediate_size", s.intermediate_size}};
  for (const auto& [field, value] : required) {
    if (value == 0) return absl::InvalidArgumentError(absl::StrCat(field, " must be > 0"));
  }
  if (s.num_kv_heads > s.num_heads || s.num_heads % s.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_attention_heads (", s.num_heads,
                                                   ") must be a multiple of num_key_value_heads (",
                                                   s.num_kv_heads, ")"));
  }
  return ParameterCount(s).status();
}

ModelSpec SpecFromModelConfig(const model::ModelConfig& c, absl::string_view name) {
  ModelSpec s;
  s.hidden_size = static_cast<uint64_t>(c.hidden_size);
  s.num_layers = static_cast<uint64_t>(c.num_layers);
  s.num_heads = static_cast<uint64_t>(c.num_heads);
  s.num_kv_heads = static_cast<uint64_t>(c.num_kv_heads);
  s.head_dim = static_cast<uint64_t>(c.head_dim);
  s.vocab_size = static_cast<uint64_t>(c.vocab_size);
  s.intermediate_size = static_cast<uint64_t>(c.intermediate_size);
  s.sliding_window = static_cast<uint64_t>(c.sliding_window);
  s.max_position_embeddings = static_cast<uint64_t>(c.max_position_embeddings);
  s.tie_word_embeddings = c.tie_word_embeddings;
  s.qkv_bias = c.qkv_bias;
  s.o_bias = c.o_bias;
  s.name = !name.empty() ? std::string(name) : (!c.model_type.empty() ? c.model_type : "config");
  s.source = "config.json";
  return s;
}

absl::StatusOr<ModelSpec> ParseHfConfig(absl::string_view config_json, absl::string_view name) {
  KVFOLD_ASSIGN_OR_RETURN(model::ModelConfig config, model::ReadHfConfig(std::string_view(config_json.data(), config_json.size())));
  ModelSpec s = SpecFromModelConfig(config, name);
  absl::Status valid = ValidateModelSpec(s);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", valid.message()));
  }
  return s;
}

absl::StatusOr<uint64_t> ParameterCount(const ModelSpec& s) {
  KVFOLD_ASSIGN_OR_RETURN(uint64_t q_width,
                                  CheckedMul("q width", {s.num_heads, s.head_dim}));
  KVFOLD_ASSIGN_OR_RETURN(uint64_t kv_width,
                                  CheckedMul("kv width", {s.num_kv_heads, s.head_dim}));
  KVFOLD_ASSIGN_OR_RETURN(
      uint64_t attn_cols, CheckedAdd("attention width", {q_width, q_width, kv_width, kv_width}));
  KVFOLD_ASSIGN_OR_RETURN(uint64_t attn,
                                  CheckedMul("attention weights", {s.hidden_size, attn_cols}));
  KVFOLD_ASSIGN_OR_RETURN(
      uint64_t mlp, CheckedMul("mlp weights", {3, s.hidden_size, s.intermediate_size}));
  uint64_t bias = 0;
  if (s.qkv_bias) bias += q_width + 2 * kv_width;
  if (s.o_bias) bias += s.hidden_size;
  KVFOLD_ASSIGN_OR_RETURN(uint64_t norms, CheckedMul("norm weights", {2, s.hidden_size}));
  KVFOLD_ASSIGN_OR_RETURN(uint64_t per_layer,
                                  CheckedAdd("layer parameters", {attn, mlp, bias, norms}));
  KVFOLD_ASSIGN_OR_RETURN(uint64_t layers,
                                  CheckedMul("layer parameters", {per_layer, s.num_layers}));
  KVFOLD_ASSIGN_OR_RETURN(
      uint64_t embed, CheckedMul("embedding parameters", {s.vocab_size, s.hidden_size}));
  uint64_t lm_head = s.tie_word_embeddings ? 0 : embed;
  return CheckedAdd("parameter count", {layers, embed, lm_head, s.hidden_size});
}

}  // namespace kvfold::planner
