// llama.cpp's GGUF model files, architectures "llama" and "qwen2": the config from the
// metadata, the tensors under their HF names (docs/model-format.md, "GGUF"). F32, F16 and
// BF16 tensors point into the mapped file. Block-quantized matrices become kvfold's Q8
// rows: Q8_0, Q4_0, Q5_0 and IQ4_NL repacked (the same numbers: an fp16 scale per 32 small
// integers), the others (Q4_1, Q5_1, Q2_K..Q6_K, IQ4_XS) decoded and quantized again; a quantized
// vector is decoded to F32. A llama model's q/k rows, which GGUF keeps in interleaved
// rotary order, are permuted to rotate_half as a llama2.c checkpoint's are.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/gguf.h"
#include "common/mapped_file.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/rotary_rows.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/quant/ggml_blocks.h"
#include "kernels/quant/weight_q8.h"

namespace kvfold::model {
namespace {

using gguf::TensorType;

// Reads the config fields of `file` whose architecture is `arch`.
class ConfigReader {
 public:
  ConfigReader(const gguf::File& file, std::string arch, std::string what)
      : file_(file), arch_(std::move(arch)), what_(std::move(what)) {}

  // `<arch>.<key>`: a positive integer (`fallback` when absent and given).
  absl::StatusOr<int> Int(const std::string& key, std::optional<int> fallback = std::nullopt) {
    const std::string name = absl::StrCat(arch_, ".", key);
    const gguf::Value* v = file_.Find(name);
    if (v == nullptr) {
      if (fallback.has_value()) return *fallback;
      return absl::InvalidArgumentError(absl::StrCat(what_, ": GGUF metadata lacks ", name));
    }
    if (!v->is_integer() || v->integer <= 0 || v->integer > (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what_, ": GGUF ", name, " must be a positive integer"));
    }
    return static_cast<int>(v->integer);
  }

  // `key` (the whole name) as a number; `fallback` when absent.
  absl::StatusOr<double> Number(const std::string& key, double fallback) {
    const gguf::Value* v = file_.Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": GGUF ", key, " must be a number"));
    }
    return v->number;
  }

 private:
  const gguf::File& file_;
  std::string arch_;
  std::string what_;
};

// Llama 3's RoPE scaling from the per-frequency factors llama.cpp's converter writes
// (`rope_freqs`: frequency i is divided by factor i): the factor is the largest, the
// original context `original` (the file's `rope.scaling.original_context_length`, else
// 8192), the low and high frequency factors Llama 3's 1 and 4. Every factor must be what
// those give (within 1e-4, relative), else Unimplemented: kvfold computes the frequencies
// from the config, as for the model's Hugging Face directory.
absl::Status ReadLlama3Scaling(const gguf::TensorInfo& freqs, int original, const std::string& what,
                               ModelConfig* c) {
  const int half = c->head_dim / 2;
  if (freqs.type != static_cast<uint32_t>(TensorType::kF32) || freqs.dims.size() != 1 ||
      freqs.dims[0] != half) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": GGUF rope_freqs must be ", half, " F32 factors (head_dim / 2)"));
  }
  if (c->rope_scaling != RopeScaling::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": GGUF rope_freqs and a rope.scaling.type both given"));
  }
  std::vector<float> factors(half);
  std::memcpy(factors.data(), freqs.data.data(), half * sizeof(float));
  float largest = 1;
  for (float f : factors) {
    if (!(f >= 1 && f <= 1e6)) {
      return absl::UnimplementedError(absl::StrCat(what, ": GGUF rope_freqs factor ", f,
                                                   " (kvfold reads Llama 3's, all >= 1)"));
    }
    largest = std::max(largest, f);
  }
  ModelConfig scaled = *c;
  scaled.rope_scaling = RopeScaling::kLlama3;
  scaled.rope_factor = largest;
  scaled.rope_low_freq_factor = 1;
  scaled.rope_high_freq_factor = 4;
  scaled.rope_original_max_position = original;
  ModelConfig plain = *c;
  plain.rope_scaling = RopeScaling::kNone;
  const std::vector<float> base = RopeInvFreq(plain, 0), want = RopeInvFreq(scaled, 0);
  for (int i = 0; i < half; ++i) {
    const double expected = static_cast<double>(base[i]) / want[i];
    if (std::abs(expected - factors[i]) > 1e-4 * expected) {
      return absl::UnimplementedError(
          absl::StrCat(what, ": GGUF rope_freqs factor ", i, " is ", factors[i], ", not ", expected,
                       " as Llama 3's RoPE scaling (factor ", largest, ", original context ",
                       original, ") gives; load the model's Hugging Face directory instead"));
    }
  }
  *c = scaled;
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ConfigOf(const gguf::File& file, const std::string& what) {
  const gguf::Value* arch = file.Find("general.architecture");
  if (arch == nullptr || arch->type != gguf::ValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": GGUF metadata lacks general.architecture"));
  }
  if (arch->string != "llama" && arch->string != "qwen2") {
    return absl::UnimplementedError(absl::StrCat(what, ": GGUF architecture '", arch->string,
                                                 "' (kvfold reads \"llama\" and \"qwen2\")"));
  }
  const std::string a = arch->string;
  ConfigReader r(file, a, what);
  ModelConfig c;
  c.architecture = a == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.model_type = a;
  c.qkv_bias = a == "qwen2";
  auto read = [&](const char* key, int* out, std::optional<int> fallback) -> absl::Status {
    auto v = r.Int(key, fallback);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
  for (auto [key, out] :
       {std::pair{"embedding_length", &c.hidden_size},
        std::pair{"feed_forward_length", &c.intermediate_size},
        std::pair{"block_count", &c.num_layers}, std::pair{"attention.head_count", &c.num_heads}}) {
    if (absl::Status s = read(key, out, std::nullopt); !s.ok()) return s;
  }
  if (absl::Status s = read("attention.head_count_kv", &c.num_kv_heads, c.num_heads); !s.ok()) {
    return s;
  }
  if (absl::Status s = read("context_length", &c.max_position_embeddings, 2048); !s.ok()) return s;
  if (c.hidden_size % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": GGUF embedding_length ", c.hidden_size,
                                                   " is not a multiple of head_count ",
                                                   c.num_heads));
  }
  if (absl::Status s = read("attention.key_length", &c.head_dim, c.hidden_size / c.num_heads);
      !s.ok()) {
    return s;
  }
  int value_length = 0;
  if (absl::Status s = read("attention.value_length", &value_length, c.head_dim); !s.ok()) return s;
  if (value_length != c.head_dim) {
    return absl::UnimplementedError(absl::StrCat(what, ": GGUF key_length ", c.head_dim,
                                                 " differs from value_length ", value_length));
  }
  auto eps = r.Number(absl::StrCat(a, ".attention.layer_norm_rms_epsilon"), 1e-5);
  if (!eps.ok()) return eps.status();
  auto theta = r.Number(absl::StrCat(a, ".rope.freq_base"), 10000.0);
  if (!theta.ok()) return theta.status();
  c.rms_norm_eps = static_cast<float>(*eps);
  c.rope_theta = static_cast<float>(*theta);
  if (const gguf::Value* s = file.Find(absl::StrCat(a, ".rope.scaling.type")); s != nullptr) {
    if (s->type != gguf::ValueType::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": GGUF ", a, ".rope.scaling.type must be a string"));
    }
    if (s->string == "linear") {
      auto factor = r.Number(absl::StrCat(a, ".rope.scaling.factor"), 1.0);
      if (!factor.ok()) return factor.status();
      c.rope_scaling = RopeScaling::kLinear;
      c.rope_factor = static_cast<float>(*factor);
    } else if (s->string != "none") {
      return absl::UnimplementedError(absl::StrCat(what, ": GGUF rope scaling '", s->string,
                                                   "' (kvfold reads none and linear)"));
    }
  }
  if (const gguf::TensorInfo* freqs = file.Tensor("rope_freqs.weight"); freqs != nullptr) {
    auto original = r.Int("rope.scaling.original_context_length", 8192);
    if (!original.ok()) return original.status();
    if (absl::Status s = ReadLlama3Scaling(*freqs, *original, what, &c); !s.ok()) return s;
  }
  for (auto [key, out] : {std::pair{"tokenizer.ggml.bos_token_id", &c.bos_token_id},
                          std::pair{"tokenizer.ggml.eos_token_id", &c.eos_token_ids[0]}}) {
    const gguf::Value* v = file.Find(key);
    if (v == nullptr) continue;  // the defaults, 1 and 2
    if (!v->is_integer() || v->integer < 0 || v->integer > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": GGUF ", key, " must be a token id (an integer >= 0)"));
    }
    *out = static_cast<int>(v->integer);
  }
  const gguf::TensorInfo* embed = file.Tensor("token_embd.weight");
  if (embed == nullptr || embed->dims.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": GGUF token_embd.weight missing or not a matrix"));
  }
  c.vocab_size = static_cast<int>(embed->dims[1]);
  c.tie_word_embeddings = file.Tensor("output.weight") == nullptr;
  if (absl::Status s = c.CheckSupported(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(what, ": GGUF config: ", s.message()));
  }
  return c;
}

// The HF name of GGUF tensor `name`; empty when the model (`qkv_bias`: q/k/v biases) has
// no such tensor.
std::string HfName(const std::string& name, int layers, bool qkv_bias) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  int layer = 0;
  if (parts.size() != 4 || parts[0] != "blk" || !absl::SimpleAtoi(parts[1], &layer) || layer < 0 ||
      layer >= layers || parts[1] != absl::StrCat(layer)) {
    return "";
  }
  if (parts[3] == "bias") {
    if (!qkv_bias) return "";
    for (const char* p : {"q", "k", "v"}) {
      if (parts[2] == absl::StrCat("attn_", p)) {
        return LayerTensorName(layer, absl::StrCat("self_attn.", p, "_proj.bias").c_str());
      }
    }
    return "";
  }
  if (parts[3] != "weight") return "";
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attn_norm", "input_layernorm.weight"},    {"attn_q", "self_attn.q_proj.weight"},
      {"attn_k", "self_attn.k_proj.weight"},      {"attn_v", "self_attn.v_proj.weight"},
      {"attn_output", "self_attn.o_proj.weight"}, {"ffn_norm", "post_attention_layernorm.weight"},
      {"ffn_gate", "mlp.gate_proj.weight"},       {"ffn_up", "mlp.up_proj.weight"},
      {"ffn_down", "mlp.down_proj.weight"},
  };
  for (const auto& [gguf_part, hf] : kLayer) {
    if (parts[2] == gguf_part) return LayerTensorName(layer, hf);
  }
  return "";
}

// True when every value is finite (a block's fp16 scale can be NaN or infinite in a
// damaged file; llama.cpp refuses such data too).
bool AllFinite(const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return false;
  }
  return true;
}

// True when every fp16 scale of a Q8 row of `cols` is finite (a decoded value beyond
// 127 * 65504 would need a larger one).
bool Q8ScalesFinite(const uint8_t* row, int64_t cols) {
  for (int64_t b = 0; b < (cols + core::kQ8Block - 1) / core::kQ8Block; ++b) {
    uint16_t h;
    std::memcpy(&h, row + b * sizeof(h), sizeof(h));
    if ((h & 0x7C00) == 0x7C00) return false;
  }
  return true;
}

absl::Status NonFinite(const std::string& what, const gguf::TensorInfo& t, int64_t row) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": GGUF tensor '", t.name, "' (", gguf::TensorTypeName(t.type), ") row ",
                   row, " decodes to a NaN, an infinity or a value no fp16 scale holds"));
}

// A block-quantized GGUF matrix (`rows` rows of `cols`) as kvfold Q8 rows: repacked when the
// type holds the same numbers, else decoded and quantized again, rows split over `pool`
// (decoding a large K-quant model is seconds of arithmetic per core). InvalidArgument
// (NonFinite) for a row with a value that is not finite.
absl::StatusOr<std::shared_ptr<std::vector<uint8_t>>> GgmlMatrixToQ8(
    const gguf::TensorInfo& t, int64_t rows, int64_t cols, const std::string& what,
    kernels::cpu::ThreadPool& pool) {
  const size_t row_bytes = core::Q8RowBytes(cols);
  const uint64_t src_row_bytes = *gguf::TensorBytes(t.type, cols);
  auto out = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows) * row_bytes);
  const auto* src = reinterpret_cast<const uint8_t*>(t.data.data());
  const bool repack = quant::RepacksToQ8Exactly(t.type);
  std::vector<std::vector<float>> values(pool.num_threads());
  std::atomic<int64_t> bad_row{rows};
  auto body = [&](int64_t begin, int64_t end, int thread) {
    std::vector<float>& row_values = values[thread];
    if (!repack) row_values.resize(cols);
    for (int64_t r = begin; r < end; ++r) {
      uint8_t* row = out->data() + r * row_bytes;
      bool ok = true;
      if (repack) {
        quant::RepackGgmlRowToQ8(t.type, src + r * src_row_bytes, cols, row);
      } else {
        quant::DequantizeGgmlBlocks(t.type, src + r * src_row_bytes, cols, row_values.data());
        ok = AllFinite(row_values.data(), cols);
        if (ok) quant::QuantizeRowQ8(row_values.data(), cols, row);
      }
      if (!ok || !Q8ScalesFinite(row, cols)) {
        int64_t seen = bad_row.load();
        while (r < seen && !bad_row.compare_exchange_weak(seen, r)) {
        }
        return;
      }
    }
  };
  constexpr int64_t kGrainElements = int64_t{1} << 16;
  pool.ParallelFor(rows, std::max<int64_t>(1, kGrainElements / cols), body);
  if (bad_row.load() < rows) return NonFinite(what, t, bad_row.load());
  return out;
}

// A block-quantized GGUF tensor of `n` elements (`cols` a row) as F32; NonFinite as above.
absl::StatusOr<std::shared_ptr<std::vector<uint8_t>>> GgmlToF32(const gguf::TensorInfo& t,
                                                                int64_t n, int64_t cols,
                                                                const std::string& what) {
  auto out = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n) * sizeof(float));
  auto* values = reinterpret_cast<float*>(out->data());
  quant::DequantizeGgmlBlocks(t.type, reinterpret_cast<const uint8_t*>(t.data.data()), n, values);
  for (int64_t r = 0; r < n / cols; ++r) {
    if (!AllFinite(values + r * cols, cols)) return NonFinite(what, t, r);
  }
  return out;
}

}  // namespace

absl::StatusOr<ModelFile> ParseGgufModel(std::string_view bytes,
                                         std::shared_ptr<const void> keepalive,
                                         std::string_view what_view) {
  const std::string what(what_view);
  auto file = gguf::Parse(bytes, what);
  if (!file.ok()) return file.status();
  auto config = ConfigOf(*file, what);
  if (!config.ok()) return config.status();
  ModelFile m;
  m.config = *config;
  m.source_format = "gguf";
  const ModelConfig& c = m.config;
  std::unique_ptr<kernels::cpu::ThreadPool> pool;  // made for the first quantized matrix
  for (const gguf::TensorInfo& t : file->tensors) {
    if (t.name == "rope_freqs.weight") continue;  // read into the config (ConfigOf)
    const std::string name = HfName(t.name, c.num_layers, c.qkv_bias);
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": GGUF tensor '", t.name, "' is not part of a ", c.model_type, " model"));
    }
    HostTensor h;
    for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it) h.shape.push_back(*it);
    const int64_t cols = t.dims[0], rows = h.numel() / cols;
    switch (static_cast<TensorType>(t.type)) {
      case TensorType::kF32:
        h.dtype = DType::kF32;
        break;
      case TensorType::kF16:
        h.dtype = DType::kF16;
        break;
      case TensorType::kBF16:
        h.dtype = DType::kBF16;
        break;
      default:
        if (!quant::IsGgmlBlockType(t.type)) {
          return absl::UnimplementedError(absl::StrCat(
              what, ": GGUF tensor '", t.name, "' is ", gguf::TensorTypeName(t.type),
              "; kvfold reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL "
              "and IQ4_XS"));
        }
        h.dtype = t.dims.size() == 2 ? DType::kQ8 : DType::kF32;
    }
    h.keepalive = keepalive;
    h.data = t.data.data();
    h.size_bytes = t.data.size();
    if (quant::IsGgmlBlockType(t.type)) {
      if (h.dtype == DType::kQ8 && pool == nullptr) {
        pool = std::make_unique<kernels::cpu::ThreadPool>(
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
      }
      auto converted = h.dtype == DType::kQ8 ? GgmlMatrixToQ8(t, rows, cols, what, *pool)
                                             : GgmlToF32(t, h.numel(), cols, what);
      if (!converted.ok()) return converted.status();
      h.data = (*converted)->data();
      h.size_bytes = (*converted)->size();
      h.keepalive = std::move(*converted);
    }
    // llama's q/k rows are interleaved in GGUF; qwen2's (NEOX rotation) are as in HF.
    const bool q = name.ends_with("q_proj.weight"), k = name.ends_with("k_proj.weight");
    if ((q || k) && c.architecture == "LlamaForCausalLM") {
      const int heads = q ? c.num_heads : c.num_kv_heads;
      if (rows != static_cast<int64_t>(heads) * c.head_dim) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": GGUF tensor '", t.name, "' has ",
                                                       rows, " rows, not ", heads * c.head_dim));
      }
      auto permuted = PermuteRotaryRows(h.data, heads, c.head_dim, h.size_bytes / rows);
      h.data = permuted->data();
      h.keepalive = std::move(permuted);
    }
    m.tensors[name] = std::move(h);
  }
  return m;
}

absl::StatusOr<ModelFile> LoadGguf(const std::string& file) {
  auto mapped = MapReadOnly(file);
  if (!mapped.ok()) return mapped.status();
  auto m = ParseGgufModel(mapped->bytes, mapped->keepalive, file);
  if (!m.ok()) return m.status();
  m->source_path = file;
  return m;
}

}  // namespace kvfold::model
