#include "inference_svc/planner/model_spec.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "inference_svc/planner/checked_math.h"
#include "nlohmann/json.hpp"

namespace kvfold::planner {
namespace {

using Json = nlohmann::json;

// For error messages; never throws (invalid UTF-8 is replaced), and long values are cut.
std::string Dump(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 64 ? text.substr(0, 64) + "..." : text;
}

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

// Reads an optional non-negative integer field. nullopt when absent (or null and
// `null_ok`); InvalidArgument for other types, fractions, negatives.
absl::StatusOr<std::optional<uint64_t>> OptionalUint(const Json& j, const char* field,
                                                     bool null_ok = false) {
  auto it = j.find(field);
  if (it == j.end() || (null_ok && it->is_null())) return std::optional<uint64_t>();
  if (it->is_number_unsigned()) return std::optional<uint64_t>(it->get<uint64_t>());
  if (it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", field, " must be > 0, got ", it->get<int64_t>()));
  }
  if (it->is_number_float()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", field, " must be an integer, got ", Dump(*it)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: ", field, " must be a positive integer, got ", Dump(*it)));
}

absl::StatusOr<uint64_t> RequiredPositive(const Json& j, const char* field) {
  KVFOLD_ASSIGN_OR_RETURN(std::optional<uint64_t> v, OptionalUint(j, field));
  if (!v.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: missing required field ", field));
  }
  if (*v == 0)
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", field, " must be > 0"));
  return *v;
}

absl::StatusOr<bool> OptionalBool(const Json& j, const char* field, bool default_value) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return default_value;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", field, " must be true or false, got ", Dump(*it)));
  }
  return it->get<bool>();
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

absl::StatusOr<ModelSpec> ParseHfConfig(absl::string_view config_json, absl::string_view name) {
  Json j = Json::parse(config_json.begin(), config_json.end(), /*cb=*/nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("config.json: malformed JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("config.json: top level must be an object");

  ModelSpec s;
  KVFOLD_ASSIGN_OR_RETURN(s.hidden_size, RequiredPositive(j, "hidden_size"));
  KVFOLD_ASSIGN_OR_RETURN(s.num_layers, RequiredPositive(j, "num_hidden_layers"));
  KVFOLD_ASSIGN_OR_RETURN(s.num_heads, RequiredPositive(j, "num_attention_heads"));
  KVFOLD_ASSIGN_OR_RETURN(s.vocab_size, RequiredPositive(j, "vocab_size"));
  KVFOLD_ASSIGN_OR_RETURN(s.intermediate_size, RequiredPositive(j, "intermediate_size"));

  KVFOLD_ASSIGN_OR_RETURN(std::optional<uint64_t> kv,
                                  OptionalUint(j, "num_key_value_heads", /*null_ok=*/true));
  if (kv.has_value() && *kv == 0) {
    return absl::InvalidArgumentError("config.json: num_key_value_heads must be > 0");
  }
  s.num_kv_heads = kv.value_or(s.num_heads);

  KVFOLD_ASSIGN_OR_RETURN(std::optional<uint64_t> hd,
                                  OptionalUint(j, "head_dim", /*null_ok=*/true));
  if (hd.has_value()) {
    if (*hd == 0) return absl::InvalidArgumentError("config.json: head_dim must be > 0");
    s.head_dim = *hd;
  } else {
    if (s.hidden_size % s.num_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: no head_dim and hidden_size (", s.hidden_size,
                       ") is not a multiple of num_attention_heads (", s.num_heads, ")"));
    }
    s.head_dim = s.hidden_size / s.num_heads;
  }

  KVFOLD_ASSIGN_OR_RETURN(bool use_sliding, OptionalBool(j, "use_sliding_window", true));
  KVFOLD_ASSIGN_OR_RETURN(std::optional<uint64_t> sw,
                                  OptionalUint(j, "sliding_window", /*null_ok=*/true));
  if (sw.has_value() && *sw == 0) {
    return absl::InvalidArgumentError("config.json: sliding_window must be > 0 or null");
  }
  s.sliding_window = use_sliding ? sw.value_or(0) : 0;

  KVFOLD_ASSIGN_OR_RETURN(std::optional<uint64_t> max_pos,
                                  OptionalUint(j, "max_position_embeddings", true));
  s.max_position_embeddings = max_pos.value_or(0);
  KVFOLD_ASSIGN_OR_RETURN(s.tie_word_embeddings,
                                  OptionalBool(j, "tie_word_embeddings", false));
  KVFOLD_ASSIGN_OR_RETURN(bool attention_bias, OptionalBool(j, "attention_bias", false));

  std::string model_type;
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    model_type = it->get<std::string>();
  }
  s.qkv_bias = attention_bias || model_type == "qwen2";
  s.o_bias = attention_bias;
  s.name = !name.empty() ? std::string(name) : (!model_type.empty() ? model_type : "config");
  s.source = "config.json";

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
