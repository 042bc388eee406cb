#include "inference_svc/model/random_model.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/fp16.h"
#include "common/rng.h"

namespace kvfold::model {
namespace {

uint64_t HashName(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

void Tiny(ModelConfig* c) {
  c->hidden_size = 64;
  c->intermediate_size = 160;
  c->num_layers = 2;
  c->num_heads = 4;
  c->num_kv_heads = 2;
  c->head_dim = 16;
  c->vocab_size = 256;
  c->max_position_embeddings = 1024;
  c->rms_norm_eps = 1e-5f;
  c->rope_theta = 10000.0f;
  c->bos_token_id = 1;
  c->eos_token_ids = {2};
}

}  // namespace

absl::StatusOr<ModelConfig> NamedShape(const std::string& name) {
  ModelConfig c;
  if (name == "llama-3.2-1b" || name == "llama-3.1-8b") {
    const bool big = name == "llama-3.1-8b";
    c.hidden_size = big ? 4096 : 2048;
    c.intermediate_size = big ? 14336 : 8192;
    c.num_layers = big ? 32 : 16;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = big ? 128 : 64;
    c.vocab_size = 128256;
    c.max_position_embeddings = 131072;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 500000.0f;
    c.tie_word_embeddings = !big;
    c.rope_scaling = RopeScaling::kLlama3;
    c.rope_factor = big ? 8.0f : 32.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_position = 8192;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001, 128008, 128009};
  } else if (name == "qwen2.5-0.5b") {
    c.architecture = "Qwen2ForCausalLM";
    c.hidden_size = 896;
    c.intermediate_size = 4864;
    c.num_layers = 24;
    c.num_heads = 14;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.vocab_size = 151936;
    c.max_position_embeddings = 32768;
    c.rms_norm_eps = 1e-6f;
    c.rope_theta = 1000000.0f;
    c.tie_word_embeddings = true;
    c.qkv_bias = true;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151645};
  } else if (name == "tiny") {
    Tiny(&c);
  } else if (name == "tiny-qwen2") {
    Tiny(&c);
    c.architecture = "Qwen2ForCausalLM";
    c.qkv_bias = true;
    c.rms_norm_eps = 1e-6f;
  } else if (name == "tiny-mha") {
    Tiny(&c);
    c.num_kv_heads = 4;
  } else if (name == "tiny-odd") {
    Tiny(&c);
    c.hidden_size = 72;
    c.num_heads = 6;
    c.num_kv_heads = 2;
    c.head_dim = 12;
    c.intermediate_size = 200;
    c.vocab_size = 263;
    c.num_layers = 3;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown shape '", name,
        "' (llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, tiny, tiny-qwen2, tiny-mha, tiny-odd)"));
  }
  return c;
}

std::map<std::string, TensorSpec> TensorSpecs(const ModelConfig& c) {
  std::map<std::string, TensorSpec> specs;
  const int64_t d = c.hidden_size, ff = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  specs["model.embed_tokens.weight"] = {{c.vocab_size, d}, InitKind::kEmbedding};
  specs["model.norm.weight"] = {{d}, InitKind::kNorm};
  if (!c.tie_word_embeddings) specs["lm_head.weight"] = {{c.vocab_size, d}, InitKind::kMatrix};
  for (int l = 0; l < c.num_layers; ++l) {
    specs[LayerTensorName(l, "input_layernorm.weight")] = {{d}, InitKind::kNorm};
    specs[LayerTensorName(l, "post_attention_layernorm.weight")] = {{d}, InitKind::kNorm};
    specs[LayerTensorName(l, "self_attn.q_proj.weight")] = {{q, d}, InitKind::kMatrix};
    specs[LayerTensorName(l, "self_attn.k_proj.weight")] = {{kv, d}, InitKind::kMatrix};
    specs[LayerTensorName(l, "self_attn.v_proj.weight")] = {{kv, d}, InitKind::kMatrix};
    specs[LayerTensorName(l, "self_attn.o_proj.weight")] = {{d, q}, InitKind::kMatrix};
    specs[LayerTensorName(l, "mlp.gate_proj.weight")] = {{ff, d}, InitKind::kMatrix};
    specs[LayerTensorName(l, "mlp.up_proj.weight")] = {{ff, d}, InitKind::kMatrix};
    specs[LayerTensorName(l, "mlp.down_proj.weight")] = {{d, ff}, InitKind::kMatrix};
    if (c.qkv_bias) {
      specs[LayerTensorName(l, "self_attn.q_proj.bias")] = {{q}, InitKind::kBias};
      specs[LayerTensorName(l, "self_attn.k_proj.bias")] = {{kv}, InitKind::kBias};
      specs[LayerTensorName(l, "self_attn.v_proj.bias")] = {{kv}, InitKind::kBias};
    }
  }
  return specs;
}

void FillRandomTensor(const std::string& name, const TensorSpec& spec, uint64_t seed,
                      DType dtype, void* out) {
  int64_t n = 1;
  for (int64_t x : spec.shape) n *= x;
  Rng rng(HashName(seed, name));
  const double fan_in = static_cast<double>(spec.shape.back());
  const double scale = spec.kind == InitKind::kMatrix      ? std::sqrt(3.0 / fan_in)
                       : spec.kind == InitKind::kEmbedding ? std::sqrt(3.0)
                                                           : 0.1;
  for (int64_t i = 0; i < n; ++i) {
    float x = static_cast<float>((2.0 * rng.Uniform() - 1.0) * scale);
    if (spec.kind == InitKind::kNorm) x += 1.0f;
    switch (dtype) {
      case DType::kF16:
        static_cast<uint16_t*>(out)[i] = Fp32ToFp16(x);
        break;
      case DType::kBF16:
        static_cast<uint16_t*>(out)[i] = Fp32ToBf16(x);
        break;
      default:
        static_cast<float*>(out)[i] = x;
    }
  }
}

ModelFile MakeRandomModel(const ModelConfig& config, uint64_t seed, DType dtype) {
  if (dtype == DType::kQ8) {
    // The F32 model with its rank-2 tensors quantized (as `kvfold convert --dtype q8`).
    ModelFile m = MakeRandomModel(config, seed, DType::kF32);
    for (auto& [name, t] : m.tensors) {
      if (t.shape.size() != 2) continue;
      absl::StatusOr<HostTensor> q = ConvertHostTensor(t, DType::kQ8);
      if (q.ok()) t = *std::move(q);  // rank 2 -> Q8 cannot fail
    }
    return m;
  }
  ModelFile m;
  m.config = config;
  m.source_path = "<random>";
  m.source_format = "hf";
  for (const auto& [name, spec] : TensorSpecs(config)) {
    HostTensor t;
    t.dtype = dtype;
    t.shape = spec.shape;
    t.size_bytes = static_cast<size_t>(t.numel()) * core::DTypeSize(dtype);
    auto storage = std::shared_ptr<char[]>(new char[t.size_bytes]);
    FillRandomTensor(name, spec, seed, dtype, storage.get());
    t.data = storage.get();
    t.keepalive = std::shared_ptr<const void>(storage, storage.get());
    m.tensors[name] = std::move(t);
  }
  return m;
}

}  // namespace kvfold::model
