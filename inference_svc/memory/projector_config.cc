// projector.json parsing/writing and the tensor list of a projector.
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "inference_svc/memory/projector.h"
#include "nlohmann/json.hpp"

namespace kvfold::memory {
namespace {

absl::Status ReadInt(const nlohmann::json& j, const char* key, int min_value, int* out) {
  if (!j.contains(key) || !j[key].is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("projector.json: '", key, "' must be an integer"));
  }
  const int64_t v = j[key].get<int64_t>();
  if (v < min_value || v > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("projector.json: '", key, "' = ", v, " is out of range"));
  }
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

}  // namespace

const char* WindowPolicyName(WindowPolicy policy) {
  return policy == WindowPolicy::kSliding ? "sliding" : "growing";
}

absl::StatusOr<ProjectorConfig> ParseProjectorConfig(std::string_view json_text) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("projector.json: not a JSON object");
  }
  if (!j.contains("format") || j["format"] != "kvfold-projector") {
    return absl::InvalidArgumentError("projector.json: 'format' must be \"kvfold-projector\"");
  }
  if (!j.contains("version") || j["version"] != 1) {
    return absl::InvalidArgumentError("projector.json: unsupported 'version' (expected 1)");
  }
  ProjectorConfig c;
  if (auto s = ReadInt(j, "mem_slots", 1, &c.mem_slots); !s.ok()) return s;
  if (auto s = ReadInt(j, "hidden_size", 1, &c.hidden_size); !s.ok()) return s;
  if (auto s = ReadInt(j, "num_heads", 1, &c.num_heads); !s.ok()) return s;
  if (auto s = ReadInt(j, "ffn_mult", 1, &c.ffn_mult); !s.ok()) return s;
  if (auto s = ReadInt(j, "chunk_size", 1, &c.chunk_size); !s.ok()) return s;
  if (auto s = ReadInt(j, "window_size", 0, &c.window_size); !s.ok()) return s;
  if (auto s = ReadInt(j, "input_layers", 1, &c.input_layers); !s.ok()) return s;
  if (c.input_layers != 1 && c.input_layers != 3) {
    return absl::InvalidArgumentError("projector.json: 'input_layers' must be 1 or 3");
  }
  if (j.contains("window_policy")) {
    const auto& v = j["window_policy"];
    if (v == "growing") {
      c.window_policy = WindowPolicy::kGrowing;
    } else if (v == "sliding") {
      c.window_policy = WindowPolicy::kSliding;
    } else {
      return absl::InvalidArgumentError(
          "projector.json: 'window_policy' must be \"growing\" or \"sliding\"");
    }
    if (c.window_policy == WindowPolicy::kSliding && c.window_size < 1) {
      return absl::InvalidArgumentError(
          "projector.json: the sliding window policy needs window_size >= 1");
    }
  }
  if (j.contains("sink_tokens")) {
    if (auto s = ReadInt(j, "sink_tokens", 0, &c.sink_tokens); !s.ok()) return s;
  }
  if (j.contains("prefix_gap")) {
    if (auto s = ReadInt(j, "prefix_gap", 0, &c.prefix_gap); !s.ok()) return s;
  }
  if (j.contains("memory_only_window")) {
    if (auto s = ReadInt(j, "memory_only_window", 0, &c.memory_only_window); !s.ok()) return s;
    if (c.memory_only_window > c.chunk_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("projector.json: 'memory_only_window' = ", c.memory_only_window,
                       " exceeds chunk_size ", c.chunk_size));
    }
  }
  const bool kv_any = j.contains("memory_kv_layers") || j.contains("memory_kv_dim") ||
                      j.contains("memory_kv_hidden");
  if (kv_any) {  // all three or none
    if (auto s = ReadInt(j, "memory_kv_layers", 1, &c.memory_kv_layers); !s.ok()) return s;
    if (auto s = ReadInt(j, "memory_kv_dim", 1, &c.memory_kv_dim); !s.ok()) return s;
    if (auto s = ReadInt(j, "memory_kv_hidden", 0, &c.memory_kv_hidden); !s.ok()) return s;
  }
  if (c.hidden_size % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("projector.json: num_heads ", c.num_heads,
                                                   " does not divide hidden_size ", c.hidden_size));
  }
  if (j.contains("dtype")) {
    if (!j["dtype"].is_string()) return absl::InvalidArgumentError("projector.json: bad 'dtype'");
    c.dtype = j["dtype"].get<std::string>();
    if (c.dtype != "f32" && c.dtype != "f16" && c.dtype != "bf16") {
      return absl::InvalidArgumentError("projector.json: 'dtype' must be f32, f16 or bf16");
    }
  }
  if (j.contains("ln_eps")) {
    if (!j["ln_eps"].is_number()) return absl::InvalidArgumentError("projector.json: bad 'ln_eps'");
    const double eps = j["ln_eps"].get<double>();
    if (!(eps >= 0.0 && eps < 1.0)) {
      return absl::InvalidArgumentError("projector.json: 'ln_eps' must be in [0, 1)");
    }
    c.ln_eps = static_cast<float>(eps);
  }
  if (!j.contains("model_fingerprint") || !j["model_fingerprint"].is_string() ||
      j["model_fingerprint"].get<std::string>().empty()) {
    return absl::InvalidArgumentError("projector.json: 'model_fingerprint' must be a non-empty string");
  }
  c.model_fingerprint = j["model_fingerprint"].get<std::string>();
  return c;
}

std::string ProjectorConfigJson(const ProjectorConfig& c) {
  nlohmann::ordered_json j;
  j["format"] = "kvfold-projector";
  j["version"] = 1;
  j["mem_slots"] = c.mem_slots;
  j["hidden_size"] = c.hidden_size;
  j["num_heads"] = c.num_heads;
  j["ffn_mult"] = c.ffn_mult;
  j["chunk_size"] = c.chunk_size;
  j["window_size"] = c.window_size;
  j["input_layers"] = c.input_layers;
  j["dtype"] = c.dtype;
  // The shortest decimal that round-trips the float (1e-05, not 9.99999974e-06).
  j["ln_eps"] = std::strtod(absl::StrFormat("%.8g", c.ln_eps).c_str(), nullptr);
  if (c.window_policy != WindowPolicy::kGrowing) j["window_policy"] = WindowPolicyName(c.window_policy);
  if (c.sink_tokens > 0) j["sink_tokens"] = c.sink_tokens;
  if (c.prefix_gap > 0) j["prefix_gap"] = c.prefix_gap;
  if (c.memory_only_window > 0) j["memory_only_window"] = c.memory_only_window;
  if (c.has_memory_kv()) {
    j["memory_kv_layers"] = c.memory_kv_layers;
    j["memory_kv_dim"] = c.memory_kv_dim;
    j["memory_kv_hidden"] = c.memory_kv_hidden;
  }
  j["model_fingerprint"] = c.model_fingerprint;
  return j.dump(2) + "\n";
}

std::vector<std::pair<std::string, std::vector<int64_t>>> ProjectorTensorShapes(
    const ProjectorConfig& c) {
  const int64_t d = c.hidden_size;
  const int64_t f = c.ffn_size();
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  shapes.push_back({"queries", {c.mem_slots, d}});
  if (c.input_layers == 3) {
    shapes.push_back({"in_proj.weight", {d, 3 * d}});
    shapes.push_back({"in_proj.bias", {d}});
  }
  for (const char* ln : {"ln_q", "ln_x", "ln_self", "ln_ffn", "ln_out"}) {
    shapes.push_back({absl::StrCat(ln, ".weight"), {d}});
    shapes.push_back({absl::StrCat(ln, ".bias"), {d}});
  }
  for (const char* block : {"cross", "self"}) {
    for (const char* p : {"q", "k", "v", "o"}) {
      shapes.push_back({absl::StrCat(block, ".", p, ".weight"), {d, d}});
      shapes.push_back({absl::StrCat(block, ".", p, ".bias"), {d}});
    }
  }
  shapes.push_back({"ffn.up.weight", {f, d}});
  shapes.push_back({"ffn.up.bias", {f}});
  shapes.push_back({"ffn.down.weight", {d, f}});
  shapes.push_back({"ffn.down.bias", {d}});
  if (c.has_memory_kv()) {
    const int64_t h = c.memory_kv_hidden, in = h > 0 ? h : d, kv = c.memory_kv_dim;
    if (h > 0) {
      shapes.push_back({"mem_kv.up.weight", {h, d}});
      shapes.push_back({"mem_kv.up.bias", {h}});
    }
    for (int l = 0; l < c.memory_kv_layers; ++l) {
      for (const char* p : {"k", "v"}) {
        shapes.push_back({absl::StrCat("mem_kv.", p, ".", l, ".weight"), {kv, in}});
        shapes.push_back({absl::StrCat("mem_kv.", p, ".", l, ".bias"), {kv}});
      }
    }
  }
  std::sort(shapes.begin(), shapes.end());
  return shapes;
}

}  // namespace kvfold::memory
