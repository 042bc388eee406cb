#include "inference_svc/model/model_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp16.h"
#include "common/gguf.h"
#include "common/sha256.h"
#include "inference_svc/model/safetensors.h"
#include "kernels/quant/weight_q8.h"
#include "nlohmann/json.hpp"

namespace kvfold::model {
namespace fs = std::filesystem;

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<HostTensor> ConvertHostTensor(const HostTensor& t, DType dtype) {
  const int64_t n = t.numel();
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = cols > 0 ? n / cols : 0;
  if (dtype == DType::kQ8 && t.shape.size() != 2) {
    return absl::InvalidArgumentError("Q8 needs a rank-2 tensor");
  }
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16 && dtype != DType::kQ8) {
    return absl::InvalidArgumentError(absl::StrCat("cannot convert to ", core::DTypeName(dtype)));
  }
  // 1. As F32, row by row.
  std::vector<float> f(static_cast<size_t>(n));
  const uint16_t* h16 = static_cast<const uint16_t*>(t.data);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = f.data() + r * cols;
    switch (t.dtype) {
      case DType::kF32:
        std::memcpy(row, static_cast<const float*>(t.data) + r * cols, cols * sizeof(float));
        break;
      case DType::kF16:
        for (int64_t c = 0; c < cols; ++c) row[c] = Fp16ToFp32(h16[r * cols + c]);
        break;
      case DType::kBF16:
        for (int64_t c = 0; c < cols; ++c) row[c] = Bf16ToFp32(h16[r * cols + c]);
        break;
      case DType::kQ8:
        quant::DequantizeRowQ8(static_cast<const uint8_t*>(t.data) + r * core::Q8RowBytes(cols),
                               cols, row);
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("cannot convert from ", core::DTypeName(t.dtype)));
    }
  }
  // 2. Encoded.
  HostTensor o = t;
  o.dtype = dtype;
  o.size_bytes = core::StorageBytes(dtype, n, cols);
  auto bytes = std::make_shared<std::vector<uint8_t>>(o.size_bytes);
  if (dtype == DType::kF32) {
    std::memcpy(bytes->data(), f.data(), o.size_bytes);
  } else if (dtype == DType::kQ8) {
    for (int64_t r = 0; r < rows; ++r) {
      quant::QuantizeRowQ8(f.data() + r * cols, cols, bytes->data() + r * core::Q8RowBytes(cols));
    }
  } else {
    uint16_t* out = reinterpret_cast<uint16_t*>(bytes->data());
    for (int64_t i = 0; i < n; ++i) out[i] = dtype == DType::kF16 ? Fp32ToFp16(f[i]) : Fp32ToBf16(f[i]);
  }
  o.data = bytes->data();
  o.keepalive = bytes;
  return o;
}

std::string LayerTensorName(int layer, const char* suffix) {
  return absl::StrCat("model.layers.", layer, ".", suffix);
}

absl::StatusOr<const HostTensor*> ModelFile::Get(const std::string& name,
                                                 const std::vector<int64_t>& shape) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    return absl::InvalidArgumentError(absl::StrCat(source_path, ": missing tensor '", name, "'"));
  }
  if (it->second.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_path, ": tensor '", name, "' has shape [", absl::StrJoin(it->second.shape, ","),
        "], expected [", absl::StrJoin(shape, ","), "]"));
  }
  return &it->second;
}

absl::Status ModelFile::ValidateTensors() const {
  const ModelConfig& c = config;
  const int64_t d = c.hidden_size, f = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> need = {
      {"model.embed_tokens.weight", {c.vocab_size, d}}, {"model.norm.weight", {d}}};
  if (!c.tie_word_embeddings) need.push_back({"lm_head.weight", {c.vocab_size, d}});
  for (int l = 0; l < c.num_layers; ++l) {
    need.push_back({LayerTensorName(l, "input_layernorm.weight"), {d}});
    need.push_back({LayerTensorName(l, "post_attention_layernorm.weight"), {d}});
    need.push_back({LayerTensorName(l, "self_attn.q_proj.weight"), {q, d}});
    need.push_back({LayerTensorName(l, "self_attn.k_proj.weight"), {kv, d}});
    need.push_back({LayerTensorName(l, "self_attn.v_proj.weight"), {kv, d}});
    need.push_back({LayerTensorName(l, "self_attn.o_proj.weight"), {d, q}});
    need.push_back({LayerTensorName(l, "mlp.gate_proj.weight"), {f, d}});
    need.push_back({LayerTensorName(l, "mlp.up_proj.weight"), {f, d}});
    need.push_back({LayerTensorName(l, "mlp.down_proj.weight"), {d, f}});
    if (c.qkv_bias) {
      need.push_back({LayerTensorName(l, "self_attn.q_proj.bias"), {q}});
      need.push_back({LayerTensorName(l, "self_attn.k_proj.bias"), {kv}});
      need.push_back({LayerTensorName(l, "self_attn.v_proj.bias"), {kv}});
    }
  }
  for (const auto& [name, shape] : need) {
    absl::StatusOr<const HostTensor*> t = Get(name, shape);
    if (!t.ok()) return t.status();
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

}  // namespace

absl::StatusOr<ModelFile> LoadHfDirectory(const std::string& dir) {
  const fs::path root(dir);
  absl::StatusOr<std::string> config_text = ReadFile(root / "config.json");
  if (!config_text.ok()) return config_text.status();
  absl::StatusOr<ModelConfig> config = ParseHfConfig(*config_text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(dir, "/config.json: ", config.status().message()));
  }
  ModelFile m;
  m.config = *config;
  m.source_path = dir;
  m.source_format = "hf";
  std::vector<std::string> shards;
  std::error_code ec;
  if (fs::exists(root / "model.safetensors", ec)) {
    shards.push_back("model.safetensors");
  } else if (fs::exists(root / "model.safetensors.index.json", ec)) {
    absl::StatusOr<std::string> index_text = ReadFile(root / "model.safetensors.index.json");
    if (!index_text.ok()) return index_text.status();
    auto index = nlohmann::json::parse(*index_text, nullptr, false);
    if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/model.safetensors.index.json: malformed (no weight_map)"));
    }
    std::set<std::string> files;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(dir, ": bad weight_map entry ", name));
      }
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(dir, ": bad shard name ", f));
      }
      files.insert(f);
    }
    shards.assign(files.begin(), files.end());
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no model.safetensors or model.safetensors.index.json"));
  }
  for (const std::string& shard : shards) {
    auto tensors = LoadSafetensorsFile((root / shard).string());
    if (!tensors.ok()) return tensors.status();
    for (auto& [name, t] : *tensors) {
      if (!m.tensors.emplace(name, std::move(t)).second) {
        return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor ", name, " in two shards"));
      }
    }
  }
  // Some HF exports of tied models still carry lm_head.weight; drop it so the fingerprint
  // and the engine see one layout.
  if (m.config.tie_word_embeddings) m.tensors.erase("lm_head.weight");
  if (absl::Status s = m.ValidateTensors(); !s.ok()) return s;
  return m;
}

namespace {

// A directory without config.json may hold one llama2.c checkpoint: the one *.bin file that
// is not a tokenizer (tokenizer.bin, tok*.bin). NotFound when there is none, InvalidArgument
// when there are several.
absl::StatusOr<std::string> FindLlama2cCheckpoint(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".bin") || name.starts_with("tok") || !entry.is_regular_file(ec)) continue;
    found.push_back(entry.path().string());
  }
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "model directory ", dir.string(),
        " has neither config.json (Hugging Face) nor a llama2.c checkpoint (*.bin)"));
  }
  if (found.size() > 1) {
    std::sort(found.begin(), found.end());
    return absl::InvalidArgumentError(absl::StrCat("model directory ", dir.string(),
                                                   " holds several llama2.c checkpoints (",
                                                   absl::StrJoin(found, ", "), "): name one"));
  }
  return found.front();
}

}  // namespace

absl::StatusOr<ModelFile> LoadModel(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "config.json", ec)) return LoadHfDirectory(path);
    absl::StatusOr<std::string> checkpoint = FindLlama2cCheckpoint(path);
    if (!checkpoint.ok()) return checkpoint.status();
    file = *checkpoint;
  }
  if (!fs::exists(file, ec)) return absl::NotFoundError(absl::StrCat("no such model: ", file));
  absl::StatusOr<ModelFile> m = gguf::IsGgufFile(file) ? LoadGguf(file) : LoadLlama2c(file);
  if (!m.ok()) return m.status();
  if (absl::Status s = m->ValidateTensors(); !s.ok()) return s;
  return m;
}

std::string Fingerprint(const ModelFile& model) {
  Sha256 h;
  const std::string canon = model.config.CanonicalString();
  h.Update(canon);
  for (const auto& [name, t] : model.tensors) {  // std::map: sorted by name
    std::string desc = absl::StrCat("\n", name, ";", core::DTypeName(t.dtype), ";",
                                    absl::StrJoin(t.shape, ","), ";", t.size_bytes, "\n");
    h.Update(desc);
    h.Update(t.data, t.size_bytes);
  }
  return h.HexDigest();
}

absl::Status WriteHfDirectory(const ModelFile& model, const std::string& dir, DType dtype) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  std::map<std::string, HostTensor> out;
  std::vector<std::shared_ptr<const void>> owned;
  for (const auto& [name, tensor] : model.tensors) {
    const HostTensor& t = tensor;  // clang 14: lambdas cannot capture structured bindings
    // Q8 applies to weight matrices; norms and biases (rank 1) stay F32.
    const DType want = dtype == DType::kQ8 && t.shape.size() != 2 ? DType::kF32 : dtype;
    HostTensor o = t;
    if (t.dtype != want) {
      absl::StatusOr<HostTensor> c = ConvertHostTensor(t, want);
      if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat(name, ": ", c.status().message()));
      o = *std::move(c);
      owned.push_back(o.keepalive);
    }
    out[name] = o;
  }
  const std::string bytes = SerializeSafetensors(out);
  {
    std::ofstream f(fs::path(dir) / "model.safetensors", std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", dir, "/model.safetensors"));
  }
  std::ofstream cfg(fs::path(dir) / "config.json", std::ios::trunc);
  cfg << ToHfConfigJson(model.config, core::DTypeName(dtype));
  if (!cfg) return absl::InternalError(absl::StrCat("cannot write ", dir, "/config.json"));
  return absl::OkStatus();
}

}  // namespace kvfold::model
