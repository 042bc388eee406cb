// Engine construction: weights onto the backend, activation scratch, KV pool, RoPE table.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fp16.h"
#include "core/kv_bytes.h"
#include "inference_svc/engine/engine_internal.h"

namespace kvfold::engine {

using core::DType;

namespace {

// Adopts a host tensor as a backend weight; `to_f32` converts F16/BF16 to F32 (norms and
// biases are tiny and the kernels want them F32).
absl::StatusOr<Tensor> Adopt(kernels::Backend& backend, const model::HostTensor& t,
                             bool to_f32, std::vector<std::unique_ptr<kernels::Buffer>>& keep) {
  const void* data = t.data;
  size_t bytes = t.size_bytes;
  std::shared_ptr<const void> alive = t.keepalive;
  DType dtype = t.dtype;
  if (to_f32 && dtype != DType::kF32) {
    auto v = std::make_shared<std::vector<float>>(t.numel());
    const uint16_t* h = static_cast<const uint16_t*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i)
      (*v)[i] = dtype == DType::kF16 ? Fp16ToFp32(h[i]) : Bf16ToFp32(h[i]);
    data = v->data();
    bytes = v->size() * sizeof(float);
    alive = v;
    dtype = DType::kF32;
  }
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> buf =
      backend.AdoptWeights(data, bytes, std::move(alive));
  if (!buf.ok()) return buf.status();
  Tensor out;
  out.data = (*buf)->data();
  out.dtype = dtype;
  out.rank = static_cast<int>(t.shape.size());
  for (size_t i = 0; i < t.shape.size(); ++i) out.shape[i] = t.shape[i];
  keep.push_back(std::move(*buf));
  return out;
}

}  // namespace

Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const model::ModelFile& model,
                                                       kernels::Backend* backend,
                                                       const EngineOptions& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("Engine: null backend");
  if (options.max_batch_tokens < 1 || options.block_size < 1) {
    return absl::InvalidArgumentError("Engine: max_batch_tokens and block_size must be >= 1");
  }
  if (absl::Status s = CheckKvDType(*backend, options.kv_dtype); !s.ok()) return s;
  if (options.kv_dtype == core::DType::kI8 && options.kv_value_group < 1) {
    return absl::InvalidArgumentError("Engine: kv_value_group must be >= 1");
  }
  if (absl::Status s = model.config.CheckSupported(); !s.ok()) return s;
  if (absl::Status s = model.ValidateTensors(); !s.ok()) return s;
  if (!backend->SupportsQ8Weights()) {
    for (const auto& [name, t] : model.tensors) {
      if (t.dtype == DType::kQ8) {
        return absl::UnimplementedError(absl::StrCat("backend ", backend->Name(),
                                                     " has no Q8 weights (tensor ", name, ")"));
      }
    }
  }
  std::unique_ptr<Engine> e(new Engine());
  e->config_ = model.config;
  e->fingerprint_ = model::Fingerprint(model);
  e->options_ = options;
  e->backend_ = backend;
  e->stream_ = backend->CreateStream();
  const model::ModelConfig& c = e->config_;

  // Weights.
  e->weights_ = std::make_unique<Weights>();
  Weights& w = *e->weights_;
  auto get = [&](const std::string& name, bool to_f32) -> absl::StatusOr<Tensor> {
    auto it = model.tensors.find(name);
    if (it == model.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing tensor ", name));
    }
    return Adopt(*backend, it->second, to_f32, w.buffers);
  };
#define KVFOLD_ASSIGN(lhs, expr)        \
  do {                                  \
    auto _r = (expr);                   \
    if (!_r.ok()) return _r.status();   \
    lhs = *_r;                          \
  } while (0)
  KVFOLD_ASSIGN(w.embed, get("model.embed_tokens.weight", false));
  KVFOLD_ASSIGN(w.final_norm, get("model.norm.weight", true));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    KVFOLD_ASSIGN(w.lm_head, get("lm_head.weight", false));
  }
  w.layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    Weights::Layer& L = w.layers[l];
    auto n = [l](const char* s) { return model::LayerTensorName(l, s); };
    KVFOLD_ASSIGN(L.attn_norm, get(n("input_layernorm.weight"), true));
    KVFOLD_ASSIGN(L.ffn_norm, get(n("post_attention_layernorm.weight"), true));
    KVFOLD_ASSIGN(L.wq, get(n("self_attn.q_proj.weight"), false));
    KVFOLD_ASSIGN(L.wk, get(n("self_attn.k_proj.weight"), false));
    KVFOLD_ASSIGN(L.wv, get(n("self_attn.v_proj.weight"), false));
    KVFOLD_ASSIGN(L.wo, get(n("self_attn.o_proj.weight"), false));
    KVFOLD_ASSIGN(L.w_gate, get(n("mlp.gate_proj.weight"), false));
    KVFOLD_ASSIGN(L.w_up, get(n("mlp.up_proj.weight"), false));
    KVFOLD_ASSIGN(L.w_down, get(n("mlp.down_proj.weight"), false));
    if (c.qkv_bias) {
      KVFOLD_ASSIGN(L.bq, get(n("self_attn.q_proj.bias"), true));
      KVFOLD_ASSIGN(L.bk, get(n("self_attn.k_proj.bias"), true));
      KVFOLD_ASSIGN(L.bv, get(n("self_attn.v_proj.bias"), true));
    }
  }

  // Derived weight layouts (the CPU's Q8 panels) now rather than in the first request.
  std::vector<const Tensor*> matmul_weights = {&w.lm_head};
  for (const Weights::Layer& L : w.layers) {
    for (const Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      matmul_weights.push_back(t);
    }
  }
  for (const Tensor* t : matmul_weights) {
    if (absl::Status s = backend->PrepareMatMulWeight(*t); !s.ok()) return s;
  }

  // Activation scratch.
  absl::StatusOr<std::unique_ptr<Scratch>> scratch = e->NewScratch(options.max_batch_tokens);
  if (!scratch.ok()) return scratch.status();
  e->scratch_ = std::move(*scratch);

  // KV pool. Int8: the initial F32 pages (one chunk's blocks plus 8 sequences' open
  // blocks; the page store doubles on demand) come out of kv_pool_bytes too.
  BlockPoolOptions pool_options;
  pool_options.dtype = options.kv_dtype;
  pool_options.value_group = std::min(options.kv_value_group, c.kv_dim());
  size_t pool_bytes = options.kv_pool_bytes;
  if (options.kv_dtype == core::DType::kI8) {
    pool_options.num_pages =
        (options.max_batch_tokens + options.block_size - 1) / options.block_size + 8;
    const size_t page_bytes =
        static_cast<size_t>(c.num_layers) * 2 * options.block_size * c.kv_dim() * sizeof(float);
    const size_t pages_bytes = page_bytes * pool_options.num_pages;
    pool_bytes = pool_bytes > pages_bytes ? pool_bytes - pages_bytes : 0;
  }
  absl::StatusOr<uint64_t> block_bytes = core::KvBytesPerBlock(
      {.num_layers = static_cast<uint64_t>(c.num_layers),
       .kv_dim = static_cast<uint64_t>(c.kv_dim()),
       .dtype = options.kv_dtype,
       .block_size = static_cast<uint64_t>(options.block_size),
       .value_group = static_cast<uint64_t>(pool_options.value_group)});
  if (!block_bytes.ok()) return block_bytes.status();
  const int num_blocks = static_cast<int>(std::max<size_t>(1, pool_bytes / *block_bytes));
  absl::StatusOr<std::unique_ptr<BlockPool>> pool =
      BlockPool::Create(backend, c.num_layers, c.num_kv_heads, c.head_dim, options.block_size,
                        num_blocks, pool_options);
  if (!pool.ok()) return pool.status();
  e->pool_ = std::move(*pool);

  const int rows = options.rope_table_rows > 0 ? options.rope_table_rows
                                               : std::min(c.max_position_embeddings, 4096);
  if (absl::Status st = e->BuildRopeTable(rows, 1); !st.ok()) return st;
  return e;
#undef KVFOLD_ASSIGN
}

// Activation scratch for max_rows rows: one buffer, carved into views.
absl::StatusOr<std::unique_ptr<Engine::Scratch>> Engine::NewScratch(int max_rows) const {
  const model::ModelConfig& c = config_;
  auto scratch = std::make_unique<Scratch>(max_rows, options_.kv_dtype == core::DType::kI8);
  Scratch& s = *scratch;
  const int64_t T = max_rows, d = c.hidden_size, f = c.intermediate_size;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  const int64_t floats = T * (d * 4 + qd * 2 + kvd * 2 + f * 2) + Scratch::kLogitRows * c.vocab_size;
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> act = backend_->Allocate(floats * sizeof(float));
  if (!act.ok()) return act.status();
  s.act_buffer = std::move(*act);
  size_t off = 0;
  auto carve = [&](std::initializer_list<int64_t> shape) {
    Tensor t = kernels::ViewOf(*s.act_buffer, off, DType::kF32, shape);
    off += t.size_bytes();
    return t;
  };
  s.x = carve({T, d});
  s.h = carve({T, d});
  s.q = carve({T, qd});
  s.k = carve({T, kvd});
  s.v = carve({T, kvd});
  s.att = carve({T, qd});
  s.o = carve({T, d});
  s.gate = carve({T, f});
  s.up = carve({T, f});
  s.sel = carve({T, d});
  s.logits = carve({Scratch::kLogitRows, c.vocab_size});
  s.sel_norm = s.h;  // the logits path runs after the last layer: h is free
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> ints = backend_->Allocate(
      T * (4 + kernels::kAttnRowFields + kernels::kAttnOwnFields + 1 + 2 * kernels::kSealFields) *
      sizeof(int32_t));
  if (!ints.ok()) return ints.status();
  s.int_buffer = std::move(*ints);
  off = 0;
  auto carve_i = [&](std::initializer_list<int64_t> shape) {
    Tensor t = kernels::ViewOf(*s.int_buffer, off, DType::kI32, shape);
    off += t.size_bytes();
    return t;
  };
  s.ids = carve_i({T});
  s.slots = carve_i({T});
  s.positions = carve_i({T});
  s.sel_idx = carve_i({T});
  s.rows = carve_i({T, kernels::kAttnRowFields});
  s.own = carve_i({T, kernels::kAttnOwnFields});
  s.pages = carve_i({T});
  s.seal = carve_i({2 * T, kernels::kSealFields});
  s.h_hidden_rows.reserve(T);
  s.h_hidden.resize(T * d);
  return scratch;
}

std::unique_ptr<KvCache> Engine::NewCache(const KvPolicy& policy) const {
  return std::make_unique<KvCache>(pool_.get(), policy);
}

absl::Status Engine::EnsureRopeTable(int64_t max_position) {
  if (max_position < rope_rows_) return absl::OkStatus();
  if (max_position >= (int64_t{1} << 28)) {
    return absl::InvalidArgumentError(absl::StrCat("position ", max_position, " too large"));
  }
  // Dynamic NTK scaling depends on the context length: use the longest position needed
  // now (not the padded table size), like HF does for its current sequence length.
  return BuildRopeTable(std::max<int64_t>(max_position + 1, 2 * int64_t{rope_rows_}),
                        max_position + 1);
}

absl::Status Engine::BuildRopeTable(int64_t rows, int64_t context_len) {
  const int hd = config_.head_dim, half = hd / 2;
  const std::vector<float> inv = model::RopeInvFreq(config_, context_len);
  std::vector<float> table(static_cast<size_t>(rows) * hd);
  for (int64_t p = 0; p < rows; ++p) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv[i];
      table[p * hd + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table[p * hd + half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> buf =
      backend_->Allocate(table.size() * sizeof(float));
  if (!buf.ok()) return buf.status();
  rope_buffer_ = std::move(*buf);
  rope_rows_ = static_cast<int>(rows);
  Tensor t = kernels::ViewOf(*rope_buffer_, 0, DType::kF32, {rows, hd});
  if (absl::Status s = backend_->CopyToDevice(*stream_, table.data(), t); !s.ok()) return s;
  return backend_->Synchronize(*stream_);
}

}  // namespace kvfold::engine
