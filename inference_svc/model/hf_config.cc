// ReadHfConfig / ParseHfConfig: the one HF config.json reader (model/config.h).
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "inference_svc/model/config.h"
#include "nlohmann/json.hpp"

namespace kvfold::model {
namespace {

using Json = nlohmann::json;

// Largest size a field may hold; ModelConfig::ValidateShapes applies the tighter per-field
// limits.
constexpr uint64_t kMaxField = uint64_t{1} << 30;

// For error messages; never throws (invalid UTF-8 is replaced), and long values are cut.
std::string Dump(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 64 ? text.substr(0, 64) + "..." : text;
}

absl::Status Bad(const char* field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json: ", field, " ", what));
}

// An optional non-negative integer field. nullopt when absent (or null and `null_ok`);
// InvalidArgument for other types, fractions, negatives and values above kMaxField.
absl::StatusOr<std::optional<int>> OptionalInt(const Json& j, const char* field,
                                               bool null_ok = false) {
  auto it = j.find(field);
  if (it == j.end() || (null_ok && it->is_null())) return std::optional<int>();
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > kMaxField) return Bad(field, absl::StrCat(v, " is larger than ", kMaxField));
    return std::optional<int>(static_cast<int>(v));
  }
  if (it->is_number_integer()) return Bad(field, absl::StrCat("must be > 0, got ", it->get<int64_t>()));
  if (it->is_number_float()) return Bad(field, absl::StrCat("must be an integer, got ", Dump(*it)));
  return Bad(field, absl::StrCat("must be a positive integer, got ", Dump(*it)));
}

absl::StatusOr<int> RequiredPositive(const Json& j, const char* field) {
  KVFOLD_ASSIGN_OR_RETURN(std::optional<int> v, OptionalInt(j, field));
  if (!v.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: missing required field ", field));
  }
  if (*v == 0) return Bad(field, "must be > 0");
  return *v;
}

// An optional positive integer: absent (or null) keeps `fallback`; 0 is refused.
absl::StatusOr<int> OptionalPositive(const Json& j, const char* field, int fallback,
                                     absl::string_view zero_message = "must be > 0") {
  KVFOLD_ASSIGN_OR_RETURN(std::optional<int> v, OptionalInt(j, field, /*null_ok=*/true));
  if (!v.has_value()) return fallback;
  if (*v == 0) return Bad(field, zero_message);
  return *v;
}

absl::StatusOr<bool> OptionalBool(const Json& j, const char* field, bool fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Bad(field, absl::StrCat("must be true or false, got ", Dump(*it)));
  return it->get<bool>();
}

absl::StatusOr<float> OptionalFloat(const Json& j, const char* field, float fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Bad(field, absl::StrCat("must be a number, got ", Dump(*it)));
  return it->get<float>();
}

absl::StatusOr<std::string> OptionalString(const Json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Bad(field, absl::StrCat("must be a string, got ", Dump(*it)));
  return it->get<std::string>();
}

absl::StatusOr<int> TokenId(const Json& v, const char* field) {
  if (!v.is_number_integer()) return Bad(field, absl::StrCat("must be an integer, got ", Dump(v)));
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id > static_cast<int64_t>(kMaxField)) {
    return Bad(field, absl::StrCat(id, " is not a token id"));
  }
  return static_cast<int>(id);
}

absl::Status ReadArchitecture(const Json& j, ModelConfig& c) {
  KVFOLD_ASSIGN_OR_RETURN(c.model_type, OptionalString(j, "model_type"));
  c.architecture.clear();
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || (!it->empty() && !(*it)[0].is_string())) {
      return Bad("architectures", absl::StrCat("must be a list of names, got ", Dump(*it)));
    }
    if (!it->empty()) c.architecture = (*it)[0].get<std::string>();
  }
  if (c.architecture.empty()) {
    c.architecture = c.model_type == "qwen2"     ? "Qwen2ForCausalLM"
                     : c.model_type == "mistral" ? "MistralForCausalLM"
                     : c.model_type == "llama"   ? "LlamaForCausalLM"
                                                 : c.model_type;
  }
  return absl::OkStatus();
}

absl::Status ReadShapes(const Json& j, ModelConfig& c) {
  KVFOLD_ASSIGN_OR_RETURN(c.hidden_size, RequiredPositive(j, "hidden_size"));
  KVFOLD_ASSIGN_OR_RETURN(c.num_layers, RequiredPositive(j, "num_hidden_layers"));
  KVFOLD_ASSIGN_OR_RETURN(c.num_heads, RequiredPositive(j, "num_attention_heads"));
  KVFOLD_ASSIGN_OR_RETURN(c.vocab_size, RequiredPositive(j, "vocab_size"));
  KVFOLD_ASSIGN_OR_RETURN(c.intermediate_size, RequiredPositive(j, "intermediate_size"));
  KVFOLD_ASSIGN_OR_RETURN(c.num_kv_heads, OptionalPositive(j, "num_key_value_heads", c.num_heads));
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: num_attention_heads (", c.num_heads,
        ") must be a multiple of num_key_value_heads (", c.num_kv_heads, ")"));
  }
  KVFOLD_ASSIGN_OR_RETURN(c.head_dim, OptionalPositive(j, "head_dim", 0));
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: no head_dim and hidden_size (", c.hidden_size,
                       ") is not a multiple of num_attention_heads (", c.num_heads, ")"));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  KVFOLD_ASSIGN_OR_RETURN(bool use_sliding, OptionalBool(j, "use_sliding_window", true));
  KVFOLD_ASSIGN_OR_RETURN(int window,
                          OptionalPositive(j, "sliding_window", 0, "must be > 0 or null"));
  c.sliding_window = use_sliding ? window : 0;
  KVFOLD_ASSIGN_OR_RETURN(c.max_position_embeddings,
                          OptionalPositive(j, "max_position_embeddings", 2048));
  KVFOLD_ASSIGN_OR_RETURN(c.tie_word_embeddings, OptionalBool(j, "tie_word_embeddings", false));
  KVFOLD_ASSIGN_OR_RETURN(c.o_bias, OptionalBool(j, "attention_bias", false));
  c.qkv_bias = c.o_bias || c.architecture == "Qwen2ForCausalLM";  // model_type qwen2 names it too
  return absl::OkStatus();
}

absl::Status ReadRope(const Json& j, ModelConfig& c) {
  KVFOLD_ASSIGN_OR_RETURN(c.rms_norm_eps, OptionalFloat(j, "rms_norm_eps", 1e-6f));
  KVFOLD_ASSIGN_OR_RETURN(c.rope_theta, OptionalFloat(j, "rope_theta", 10000.0f));
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return Bad("rope_scaling", absl::StrCat("must be an object, got ", Dump(*it)));
  const Json& rs = *it;
  KVFOLD_ASSIGN_OR_RETURN(std::string type, OptionalString(rs, "rope_type"));
  if (type.empty()) {
    KVFOLD_ASSIGN_OR_RETURN(type, OptionalString(rs, "type"));
  }
  KVFOLD_ASSIGN_OR_RETURN(c.rope_factor, OptionalFloat(rs, "factor", 1.0f));
  if (type == "llama3") {
    c.rope_scaling = RopeScaling::kLlama3;
    KVFOLD_ASSIGN_OR_RETURN(c.rope_low_freq_factor, OptionalFloat(rs, "low_freq_factor", 1.0f));
    KVFOLD_ASSIGN_OR_RETURN(c.rope_high_freq_factor, OptionalFloat(rs, "high_freq_factor", 4.0f));
    KVFOLD_ASSIGN_OR_RETURN(c.rope_original_max_position,
                            OptionalPositive(rs, "original_max_position_embeddings", 8192));
  } else if (type == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
  } else if (type == "dynamic") {
    c.rope_scaling = RopeScaling::kDynamic;
  } else if (type.empty() || type == "default") {
    c.rope_scaling = RopeScaling::kNone;
  } else {
    c.unsupported_rope_type = type;
  }
  return absl::OkStatus();
}

absl::Status ReadTokenIds(const Json& j, ModelConfig& c) {
  if (auto it = j.find("bos_token_id"); it != j.end() && !it->is_null()) {
    KVFOLD_ASSIGN_OR_RETURN(c.bos_token_id, TokenId(*it, "bos_token_id"));
  }
  c.eos_token_ids.clear();
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_array()) {
      for (const Json& v : *it) {
        KVFOLD_ASSIGN_OR_RETURN(int id, TokenId(v, "eos_token_id"));
        c.eos_token_ids.push_back(id);
      }
    } else {
      KVFOLD_ASSIGN_OR_RETURN(int id, TokenId(*it, "eos_token_id"));
      c.eos_token_ids.push_back(id);
    }
  }
  if (c.eos_token_ids.empty()) c.eos_token_ids.push_back(2);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ReadHfConfig(std::string_view json_text) {
  const Json j = Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("config.json: malformed JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("config.json: top level must be an object");
  ModelConfig c;
  KVFOLD_RETURN_IF_ERROR(ReadArchitecture(j, c));
  KVFOLD_RETURN_IF_ERROR(ReadShapes(j, c));
  KVFOLD_RETURN_IF_ERROR(ReadRope(j, c));
  KVFOLD_RETURN_IF_ERROR(ReadTokenIds(j, c));
  if (absl::Status s = c.ValidateShapes(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", s.message()));
  }
  return c;
}

absl::StatusOr<ModelConfig> ParseHfConfig(std::string_view json_text) {
  KVFOLD_ASSIGN_OR_RETURN(ModelConfig c, ReadHfConfig(json_text));
  KVFOLD_RETURN_IF_ERROR(c.CheckSupported());
  return c;
}

}  // namespace kvfold::model
