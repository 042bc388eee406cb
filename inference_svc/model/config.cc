#include "inference_svc/model/config.h"

#include <cmath>
#include <cstdio>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace kvfold::model {

const char* RopeScalingName(RopeScaling scaling) {
  switch (scaling) {
    case RopeScaling::kNone:
      return "none";
    case RopeScaling::kLlama3:
      return "llama3";
    case RopeScaling::kLinear:
      return "linear";
    case RopeScaling::kDynamic:
      return "dynamic";
  }
  return "?";
}

absl::Status ModelConfig::CheckSupported() const {
  if (architecture != "LlamaForCausalLM" && architecture != "MistralForCausalLM" &&
      architecture != "Qwen2ForCausalLM") {
    return absl::UnimplementedError(absl::StrCat("unsupported architecture '", architecture,
                                                 "' (expected LlamaForCausalLM, "
                                                 "MistralForCausalLM or Qwen2ForCausalLM)"));
  }
  if (!unsupported_rope_type.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("config.json: unsupported rope_scaling type '", unsupported_rope_type, "'"));
  }
  return ValidateShapes();
}

absl::Status ModelConfig::ValidateShapes() const {
  auto bad = [](const char* field, auto value) {
    return absl::InvalidArgumentError(absl::StrCat("model config: invalid ", field, " = ", value));
  };
  if (hidden_size <= 0 || hidden_size > (1 << 16)) return bad("hidden_size", hidden_size);
  if (intermediate_size <= 0 || intermediate_size > (1 << 18)) {
    return bad("intermediate_size", intermediate_size);
  }
  if (num_layers <= 0 || num_layers > 1024) return bad("num_hidden_layers", num_layers);
  if (num_heads <= 0 || num_heads > 1024) return bad("num_attention_heads", num_heads);
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) {
    return bad("num_key_value_heads", num_kv_heads);
  }
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > 1024) return bad("head_dim", head_dim);
  if (vocab_size <= 0 || vocab_size > (1 << 24)) return bad("vocab_size", vocab_size);
  if (max_position_embeddings <= 0) return bad("max_position_embeddings", max_position_embeddings);
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps)) return bad("rms_norm_eps", rms_norm_eps);
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) return bad("rope_theta", rope_theta);
  if (rope_scaling != RopeScaling::kNone && !(rope_factor > 0)) return bad("rope_scaling.factor", rope_factor);
  if (bos_token_id < 0 || bos_token_id >= vocab_size) return bad("bos_token_id", bos_token_id);
  for (int id : eos_token_ids) {
    if (id < 0 || id >= vocab_size) return bad("eos_token_id", id);
  }
  return absl::OkStatus();
}

std::string ModelConfig::CanonicalString() const {
  // Fixed field order; floats as %.9g (round-trips float32). Architecture-independent
  // except through the fields that change the math.
  std::string s = absl::StrFormat(
      "kvfold-model-v1;hidden_size=%d;intermediate_size=%d;num_layers=%d;num_heads=%d;"
      "num_kv_heads=%d;head_dim=%d;vocab_size=%d;rms_norm_eps=%.9g;rope_theta=%.9g;"
      "tie_word_embeddings=%d;qkv_bias=%d;rope_scaling=%s",
      hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim,
      vocab_size, rms_norm_eps, rope_theta, tie_word_embeddings ? 1 : 0, qkv_bias ? 1 : 0,
      RopeScalingName(rope_scaling));
  if (rope_scaling != RopeScaling::kNone) {
    absl::StrAppendFormat(&s, ";rope_factor=%.9g", rope_factor);
  }
  if (rope_scaling == RopeScaling::kLlama3) {
    absl::StrAppendFormat(&s, ";low=%.9g;high=%.9g;original_max=%d", rope_low_freq_factor,
                          rope_high_freq_factor, rope_original_max_position);
  }
  if (rope_scaling == RopeScaling::kDynamic) {
    absl::StrAppendFormat(&s, ";max_position=%d", max_position_embeddings);
  }
  return s;
}

using nlohmann::json;

std::string ToHfConfigJson(const ModelConfig& c, std::string_view torch_dtype) {
  json j;
  j["architectures"] = {c.architecture};
  j["model_type"] = c.architecture == "Qwen2ForCausalLM"     ? "qwen2"
                    : c.architecture == "MistralForCausalLM" ? "mistral"
                                                             : "llama";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = std::string(torch_dtype == "f16"    ? "float16"
                                 : torch_dtype == "bf16" ? "bfloat16"
                                                         : "float32");
  if (c.architecture == "LlamaForCausalLM") j["attention_bias"] = c.qkv_bias;
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (c.rope_scaling != RopeScaling::kNone) {
    json rs;
    rs["rope_type"] = RopeScalingName(c.rope_scaling);
    rs["factor"] = c.rope_factor;
    if (c.rope_scaling == RopeScaling::kLlama3) {
      rs["low_freq_factor"] = c.rope_low_freq_factor;
      rs["high_freq_factor"] = c.rope_high_freq_factor;
      rs["original_max_position_embeddings"] = c.rope_original_max_position;
    }
    j["rope_scaling"] = rs;
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else {
    j["eos_token_id"] = c.eos_token_ids;
  }
  return j.dump(2) + "\n";
}

std::vector<float> RopeInvFreq(const ModelConfig& c, int64_t context_len) {
  const int half = c.head_dim / 2;
  double base = c.rope_theta;
  if (c.rope_scaling == RopeScaling::kDynamic && context_len > c.max_position_embeddings) {
    const double dim = c.head_dim;
    base *= std::pow(c.rope_factor * static_cast<double>(context_len) / c.max_position_embeddings -
                         (c.rope_factor - 1.0),
                     dim / (dim - 2.0));
  }
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[i] = static_cast<float>(1.0 / std::pow(base, static_cast<double>(exponent)));
  }
  if (c.rope_scaling == RopeScaling::kLinear) {
    for (float& f : inv) f /= c.rope_factor;
  } else if (c.rope_scaling == RopeScaling::kLlama3) {
    const double old_len = c.rope_original_max_position;
    const double low_wavelen = old_len / c.rope_low_freq_factor;
    const double high_wavelen = old_len / c.rope_high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / c.rope_factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - c.rope_low_freq_factor) /
                              (c.rope_high_freq_factor - c.rope_low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / c.rope_factor + smooth * f);
      }
    }
  }
  return inv;
}

}  // namespace kvfold::model
