// llama2.c checkpoints ("version 0" / legacy export: 7 x int32 header, fp32 weights).
// A negative vocab_size means the classifier is stored separately (untied).
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/rotary_rows.h"

namespace kvfold::model {

absl::StatusOr<ModelFile> ParseLlama2c(std::shared_ptr<const std::string> bytes) {
  const std::string& b = *bytes;
  if (b.size() < 28) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama2.c checkpoint truncated: ", b.size(), " bytes, header needs 28"));
  }
  int32_t h[7];
  std::memcpy(h, b.data(), sizeof(h));
  if (h[0] == 0x616b3432) {
    return absl::UnimplementedError("llama2.c export format version 1/2 ('ak42') is not supported; "
                                    "export with version 0 (legacy)");
  }
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = h[0];
  c.intermediate_size = h[1];
  c.num_layers = h[2];
  c.num_heads = h[3];
  c.num_kv_heads = h[4];
  const bool shared = h[5] > 0;
  c.vocab_size = h[5] > 0 ? h[5] : (h[5] == INT32_MIN ? 0 : -h[5]);
  c.max_position_embeddings = h[6];
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = shared;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("llama2.c header: dim ", c.hidden_size,
                                                   " not divisible by n_heads ", c.num_heads));
  }
  if (absl::Status s = c.CheckSupported(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("llama2.c header: ", s.message()));
  }
  const int64_t d = c.hidden_size, f = c.intermediate_size, L = c.num_layers;
  const int64_t kv = c.kv_dim(), V = c.vocab_size, hd = c.head_dim;
  const int64_t seq = c.max_position_embeddings;
  const int64_t floats = V * d + L * d + L * d * d + 2 * L * kv * d + L * d * d + L * d +
                         3 * L * f * d + d + seq * hd + (shared ? 0 : V * d);
  const int64_t need = 28 + floats * 4;
  if (static_cast<int64_t>(b.size()) != need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c checkpoint has ", b.size(), " bytes but its header implies ", need,
        static_cast<int64_t>(b.size()) < need ? " (truncated)" : " (trailing data)"));
  }
  ModelFile m;
  m.config = c;
  m.source_format = "llama2c";
  const float* p = reinterpret_cast<const float*>(b.data() + 28);
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const void* data,
                 std::shared_ptr<const void> keep) {
    HostTensor t;
    t.dtype = DType::kF32;
    t.shape = std::move(shape);
    t.data = data;
    t.size_bytes = t.numel() * 4;
    t.keepalive = std::move(keep);
    m.tensors[name] = std::move(t);
  };
  add("model.embed_tokens.weight", {V, d}, p, bytes);
  p += V * d;
  const float* rms_att = p;
  p += L * d;
  const float* wq = p;
  p += L * d * d;
  const float* wk = p;
  p += L * kv * d;
  const float* wv = p;
  p += L * kv * d;
  const float* wo = p;
  p += L * d * d;
  const float* rms_ffn = p;
  p += L * d;
  const float* w1 = p;
  p += L * f * d;
  const float* w2 = p;
  p += L * d * f;
  const float* w3 = p;
  p += L * f * d;
  add("model.norm.weight", {d}, p, bytes);
  p += d + seq * hd;  // skip freq_cis_real / freq_cis_imag
  if (!shared) add("lm_head.weight", {V, d}, p, bytes);
  for (int64_t l = 0; l < L; ++l) {
    const int li = static_cast<int>(l);
    add(LayerTensorName(li, "input_layernorm.weight"), {d}, rms_att + l * d, bytes);
    auto q = PermuteRotaryRows(wq + l * d * d, c.num_heads, c.head_dim, c.hidden_size * 4);
    add(LayerTensorName(li, "self_attn.q_proj.weight"), {d, d}, q->data(), q);
    auto k = PermuteRotaryRows(wk + l * kv * d, c.num_kv_heads, c.head_dim, c.hidden_size * 4);
    add(LayerTensorName(li, "self_attn.k_proj.weight"), {kv, d}, k->data(), k);
    add(LayerTensorName(li, "self_attn.v_proj.weight"), {kv, d}, wv + l * kv * d, bytes);
    add(LayerTensorName(li, "self_attn.o_proj.weight"), {d, d}, wo + l * d * d, bytes);
    add(LayerTensorName(li, "post_attention_layernorm.weight"), {d}, rms_ffn + l * d, bytes);
    add(LayerTensorName(li, "mlp.gate_proj.weight"), {f, d}, w1 + l * f * d, bytes);
    add(LayerTensorName(li, "mlp.down_proj.weight"), {d, f}, w2 + l * d * f, bytes);
    add(LayerTensorName(li, "mlp.up_proj.weight"), {f, d}, w3 + l * f * d, bytes);
  }
  return m;
}

absl::StatusOr<ModelFile> LoadLlama2c(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", file));
  std::ostringstream ss;
  ss << in.rdbuf();
  auto bytes = std::make_shared<const std::string>(std::move(ss).str());
  absl::StatusOr<ModelFile> m = ParseLlama2c(bytes);
  if (!m.ok()) {
    return absl::Status(m.status().code(), absl::StrCat(file, ": ", m.status().message()));
  }
  m->source_path = file;
  return m;
}

}  // namespace kvfold::model
