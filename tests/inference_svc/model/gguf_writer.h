// Writes GGUF files (version 3) for tests: typed metadata and tensors laid out as
// llama.cpp's writer lays them out (tensor infos, then the data, each tensor aligned), and
// a kvfold model as llama.cpp's converters write a llama model (GGUF names, dimensions
// fastest first, q/k rows in interleaved rotary order, a tied model without
// output.weight).
#ifndef KVFOLD_TESTS_INFERENCE_SVC_MODEL_GGUF_WRITER_H_
#define KVFOLD_TESTS_INFERENCE_SVC_MODEL_GGUF_WRITER_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "core/dtype.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/tokenizer/sentencepiece_model.h"

namespace kvfold::testing {

class GgufWriter {
 public:
  void String(const std::string& key, const std::string& value) {
    Key(key, gguf::ValueType::kString);
    Str(&kv_, value);
    ++n_kv_;
  }
  void U32(const std::string& key, uint32_t value) { Scalar(key, gguf::ValueType::kU32, value); }
  void I32(const std::string& key, int32_t value) { Scalar(key, gguf::ValueType::kI32, value); }
  void F32(const std::string& key, float value) { Scalar(key, gguf::ValueType::kF32, value); }
  void Bool(const std::string& key, bool value) {
    Scalar(key, gguf::ValueType::kBool, static_cast<uint8_t>(value));
  }
  void Strings(const std::string& key, const std::vector<std::string>& values) {
    ArrayHead(key, gguf::ValueType::kString, values.size());
    for (const std::string& v : values) Str(&kv_, v);
  }
  void F32s(const std::string& key, const std::vector<float>& values) {
    ArrayHead(key, gguf::ValueType::kF32, values.size());
    for (float v : values) Put(&kv_, v);
  }
  void I32s(const std::string& key, const std::vector<int32_t>& values) {
    ArrayHead(key, gguf::ValueType::kI32, values.size());
    for (int32_t v : values) Put(&kv_, v);
  }
  // `dims` fastest first; `data` the tensor's bytes in `type`.
  void Tensor(const std::string& name, std::vector<int64_t> dims, uint32_t type, std::string data) {
    tensors_.push_back({name, std::move(dims), type, std::move(data)});
  }

  std::string Bytes(uint32_t version = 3, uint64_t alignment = 32) const {
    std::string out = "GGUF";
    Put(&out, version);
    Put(&out, static_cast<uint64_t>(tensors_.size()));
    Put(&out, n_kv_);
    out += kv_;
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      Str(&out, t.name);
      Put(&out, static_cast<uint32_t>(t.dims.size()));
      for (int64_t d : t.dims) Put(&out, static_cast<uint64_t>(d));
      Put(&out, t.type);
      Put(&out, offset);
      offsets.push_back(offset);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(data_start + offsets[i], '\0');
      out += tensors_[i].data;
    }
    return out;
  }

 private:
  struct Pending {
    std::string name;
    std::vector<int64_t> dims;
    uint32_t type;
    std::string data;
  };
  template <typename T>
  static void Put(std::string* out, T v) {
    out->append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  static void Str(std::string* out, const std::string& s) {
    Put(out, static_cast<uint64_t>(s.size()));
    *out += s;
  }
  void Key(const std::string& key, gguf::ValueType type) {
    Str(&kv_, key);
    Put(&kv_, static_cast<uint32_t>(type));
  }
  template <typename T>
  void Scalar(const std::string& key, gguf::ValueType type, T v) {
    Key(key, type);
    Put(&kv_, v);
    ++n_kv_;
  }
  void ArrayHead(const std::string& key, gguf::ValueType element, size_t n) {
    Key(key, gguf::ValueType::kArray);
    Put(&kv_, static_cast<uint32_t>(element));
    Put(&kv_, static_cast<uint64_t>(n));
    ++n_kv_;
  }

  std::string kv_;
  uint64_t n_kv_ = 0;
  std::vector<Pending> tensors_;
};

// A SentencePiece model's pieces, scores and types as llama.cpp's converters write a
// "llama" vocabulary.
inline void AddSentencePieceVocabulary(const tokenizer_internal::SentencePieceModelProto& model,
                                       GgufWriter* w) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const auto& p : model.pieces) {
    tokens.push_back(p.piece);
    scores.push_back(p.score);
    types.push_back(p.type);
  }
  w->String("tokenizer.ggml.model", "llama");
  w->Strings("tokenizer.ggml.tokens", tokens);
  w->F32s("tokenizer.ggml.scores", scores);
  w->I32s("tokenizer.ggml.token_type", types);
}

// GGUF's interleaved rotary rows from the engine's rotate_half rows (the inverse of
// model::PermuteRotaryRows): old row (h, 2i + p) = row (h, p, i).
inline std::string InterleavedRows(const void* w, int heads, int head_dim, size_t row_bytes) {
  std::string out(static_cast<size_t>(heads) * head_dim * row_bytes, '\0');
  const auto* src = static_cast<const char*>(w);
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h)
    for (int p = 0; p < 2; ++p)
      for (int i = 0; i < half; ++i) {
        std::memcpy(out.data() + static_cast<size_t>(h * head_dim + 2 * i + p) * row_bytes,
                    static_cast<const char*>(src) +
                        static_cast<size_t>(h * head_dim + p * half + i) * row_bytes,
                    row_bytes);
      }
  return out;
}

// kvfold Q8 rows (every scale, then the codes) as GGUF Q8_0 blocks (a scale, 32 codes).
inline std::string Q8_0Blocks(const void* q8, int64_t rows, int64_t cols) {
  const int64_t blocks = cols / 32;
  const size_t row_bytes = core::Q8RowBytes(cols);
  std::string out;
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = static_cast<const char*>(q8) + r * row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      out.append(row + 2 * b, 2);
      out.append(row + 2 * blocks + 32 * b, 32);
    }
  }
  return out;
}

// The GGUF name of HF tensor `name` (a llama model's).
inline std::string GgufName(const std::string& name) {
  if (name == "model.embed_tokens.weight") return "token_embd.weight";
  if (name == "model.norm.weight") return "output_norm.weight";
  if (name == "lm_head.weight") return "output.weight";
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm.weight", "attn_norm"},    {"self_attn.q_proj.weight", "attn_q"},
      {"self_attn.k_proj.weight", "attn_k"},      {"self_attn.v_proj.weight", "attn_v"},
      {"self_attn.o_proj.weight", "attn_output"}, {"post_attention_layernorm.weight", "ffn_norm"},
      {"mlp.gate_proj.weight", "ffn_gate"},       {"mlp.up_proj.weight", "ffn_up"},
      {"mlp.down_proj.weight", "ffn_down"}};
  const std::string prefix = "model.layers.";
  const size_t dot = name.find('.', prefix.size());
  const std::string layer = name.substr(prefix.size(), dot - prefix.size());
  const std::string rest = name.substr(dot + 1);
  for (const auto& [hf, gguf_part] : kLayer) {
    if (rest == hf) return absl::StrCat("blk.", layer, ".", gguf_part, ".weight");
  }
  for (const char* p : {"q", "k", "v"}) {
    if (rest == absl::StrCat("self_attn.", p, "_proj.bias")) {
      return absl::StrCat("blk.", layer, ".attn_", p, ".bias");
    }
  }
  return name;
}

// Llama 3's per-frequency RoPE factors as llama.cpp's converter computes them (F32 bytes).
inline std::string Llama3RopeFactors(const model::ModelConfig& c) {
  const double old_len = c.rope_original_max_position;
  const double low_wavelen = old_len / c.rope_low_freq_factor;
  const double high_wavelen = old_len / c.rope_high_freq_factor;
  std::string out;
  for (int i = 0; i < c.head_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(static_cast<double>(c.rope_theta),
                                       2.0 * i / static_cast<double>(c.head_dim));
    const double wavelen = 2 * 3.14159265358979323846 / freq;
    double factor = 1;
    if (wavelen > low_wavelen) {
      factor = c.rope_factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (old_len / wavelen - c.rope_low_freq_factor) /
                            (c.rope_high_freq_factor - c.rope_low_freq_factor);
      factor = 1 / ((1 - smooth) / c.rope_factor + smooth);
    }
    const float f = static_cast<float>(factor);
    out.append(reinterpret_cast<const char*>(&f), sizeof(f));
  }
  return out;
}

// Rewrites a tensor as GgufOf is about to write it: its GGUF name, dimensions (fastest
// first), ggml type and bytes (q/k rows already interleaved).
using GgufTensorHook = std::function<void(const std::string& name, const std::vector<int64_t>& dims,
                                          uint32_t* type, std::string* data)>;

// `m` (a llama or qwen2 model, every tensor F32, F16, BF16 or Q8) as llama.cpp's
// converters write it (llama's q/k rows interleaved), with the architecture's metadata and
// no vocabulary (add one with the writer's calls); `hook`, when given, sees every tensor.
inline GgufWriter GgufOf(const model::ModelFile& m, const GgufTensorHook& hook = {}) {
  const model::ModelConfig& c = m.config;
  GgufWriter w;
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const std::string a = qwen2 ? "qwen2" : "llama";
  w.String("general.architecture", a);
  w.U32(a + ".context_length", c.max_position_embeddings);
  w.U32(a + ".embedding_length", c.hidden_size);
  w.U32(a + ".feed_forward_length", c.intermediate_size);
  w.U32(a + ".block_count", c.num_layers);
  w.U32(a + ".attention.head_count", c.num_heads);
  w.U32(a + ".attention.head_count_kv", c.num_kv_heads);
  w.F32(a + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  w.F32(a + ".rope.freq_base", c.rope_theta);
  if (c.rope_scaling == model::RopeScaling::kLlama3) {
    if (c.rope_original_max_position != 8192) {
      w.U32(a + ".rope.scaling.original_context_length", c.rope_original_max_position);
    }
    w.Tensor("rope_freqs.weight", {c.head_dim / 2}, 0, Llama3RopeFactors(c));
  }
  w.U32("tokenizer.ggml.bos_token_id", c.bos_token_id);
  w.U32("tokenizer.ggml.eos_token_id", c.eos_token_ids.at(0));
  for (const auto& [name, t] : m.tensors) {
    std::vector<int64_t> dims(t.shape.rbegin(), t.shape.rend());
    const int64_t cols = dims[0], rows = t.numel() / cols;
    const size_t row_bytes = t.size_bytes / rows;
    std::string data(static_cast<const char*>(t.data), t.size_bytes);
    const bool q = name.ends_with("q_proj.weight"), k = name.ends_with("k_proj.weight");
    if ((q || k) && !qwen2) {
      data = InterleavedRows(t.data, q ? c.num_heads : c.num_kv_heads, c.head_dim, row_bytes);
    }
    uint32_t type = static_cast<uint32_t>(gguf::TensorType::kF32);
    if (t.dtype == core::DType::kF16) type = static_cast<uint32_t>(gguf::TensorType::kF16);
    if (t.dtype == core::DType::kBF16) type = static_cast<uint32_t>(gguf::TensorType::kBF16);
    if (t.dtype == core::DType::kQ8) {
      type = static_cast<uint32_t>(gguf::TensorType::kQ8_0);
      data = Q8_0Blocks(data.data(), rows, cols);
    }
    if (hook) hook(GgufName(name), dims, &type, &data);
    w.Tensor(GgufName(name), std::move(dims), type, std::move(data));
  }
  return w;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INFERENCE_SVC_MODEL_GGUF_WRITER_H_
