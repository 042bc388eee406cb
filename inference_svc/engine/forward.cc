// Engine::Forward: the whole transformer pass for a ragged batch of sequences. Forward
// validates the inputs, lays out the outputs and cuts the rows into chunks; each chunk is
// placed by the batch planner (batch_plan.h; row placement: docs/contracts.md) and then
// runs the layer loop, top to bottom like llama2.c's forward: embed; per layer rmsnorm,
// q k v, rope, kv write, attention, output projection, residual, rmsnorm, ffn, residual;
// final norm and logits.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "inference_svc/engine/engine_internal.h"

namespace kvfold::engine {

namespace {

int NumRows(const SequenceInput& in, int hidden_size) {
  return in.token_ids.empty() ? static_cast<int>(in.embeddings.size() / hidden_size)
                              : static_cast<int>(in.token_ids.size());
}

int Selected(RowSelect sel, int rows) {
  return sel == RowSelect::kAll ? rows : sel == RowSelect::kLast ? 1 : 0;
}

absl::Status ValidateInput(const SequenceInput& in, const model::ModelConfig& c,
                           int max_batch_tokens) {
  const int d = c.hidden_size;
  if (in.cache == nullptr) return absl::InvalidArgumentError("Forward: input without a cache");
  if (in.token_ids.empty() == in.embeddings.empty()) {
    return absl::InvalidArgumentError(
        "Forward: each input needs exactly one of token_ids or embeddings");
  }
  if (!in.embeddings.empty() && in.embeddings.size() % d != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: embeddings size ",
                                                   in.embeddings.size(),
                                                   " is not a multiple of hidden_size ", d));
  }
  for (int32_t id : in.token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("Forward: token id ", id, " outside [0, ", c.vocab_size, ")"));
    }
  }
  const int rows = NumRows(in, d);
  if (!in.positions.empty() && static_cast<int>(in.positions.size()) != rows) {
    return absl::InvalidArgumentError("Forward: positions must have one entry per row");
  }
  for (int32_t p : in.positions) {
    if (p < 0) return absl::InvalidArgumentError("Forward: negative position");
  }
  if (in.hidden_layers != 1 && in.hidden_layers != 3) {
    return absl::InvalidArgumentError("Forward: hidden_layers must be 1 or 3");
  }
  if (in.hidden_layers > c.num_layers) {
    return absl::InvalidArgumentError("Forward: hidden_layers exceeds the model's layers");
  }
  if (in.mask == MaskKind::kBidirectionalPrefix && rows > max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: a bidirectional prefix of ", rows,
                                                   " rows exceeds max_batch_tokens ",
                                                   max_batch_tokens));
  }
  if (in.mask == MaskKind::kBidirectionalPrefix && in.cache->policy().window > 0 &&
      in.cache->main_len() > 0) {
    return absl::InvalidArgumentError(
        "Forward: prefix rows under a windowed policy need an empty main segment");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Engine::Forward(std::span<const SequenceInput> inputs, ForwardResult* result) {
  const model::ModelConfig& c = config_;
  const int d = c.hidden_size;
  const int T = options_.max_batch_tokens;
  Scratch& s = *scratch_;
  if (inputs.empty()) return absl::InvalidArgumentError("Forward: no inputs");
  const size_t num = inputs.size();
  s.logit_row_offset.resize(num);
  s.hidden_row_offset.resize(num);
  size_t logit_floats = 0, hidden_floats = 0;
  for (size_t i = 0; i < num; ++i) {
    const SequenceInput& in = inputs[i];
    KVFOLD_RETURN_IF_ERROR(ValidateInput(in, c, T));
    const int rows = NumRows(in, d);
    s.logit_row_offset[i] = static_cast<int>(logit_floats / c.vocab_size);
    s.hidden_row_offset[i] = static_cast<int>(hidden_floats / d);
    logit_floats += static_cast<size_t>(Selected(in.logits, rows)) * c.vocab_size;
    hidden_floats += static_cast<size_t>(Selected(in.hidden, rows)) * in.hidden_layers * d;
  }
  result->logits_storage.resize(logit_floats);
  result->hidden_storage.resize(hidden_floats);
  result->outputs.resize(num);
  for (size_t i = 0; i < num; ++i) {
    const SequenceInput& in = inputs[i];
    const int rows = NumRows(in, d);
    SequenceOutput& out = result->outputs[i];
    out.num_logit_rows = Selected(in.logits, rows);
    out.logits = std::span<const float>(
        result->logits_storage.data() + static_cast<size_t>(s.logit_row_offset[i]) * c.vocab_size,
        static_cast<size_t>(out.num_logit_rows) * c.vocab_size);
    out.num_hidden_rows = Selected(in.hidden, rows);
    out.hidden = std::span<const float>(
        result->hidden_storage.data() + static_cast<size_t>(s.hidden_row_offset[i]) * d,
        static_cast<size_t>(out.num_hidden_rows) * in.hidden_layers * d);
  }

  // Chunking: walk the rows in order, at most T per chunk; a bidirectional input is never
  // split (its rows must see each other).
  s.piece_begin.assign(num, 0);
  s.piece_count.assign(num, 0);
  s.rows_done.assign(num, 0);
  const ChunkSpec chunk{
      inputs, s.piece_begin, s.piece_count, s.logit_row_offset, s.hidden_row_offset, d};
  size_t i = 0;
  while (i < num) {
    std::fill(s.piece_count.begin(), s.piece_count.end(), 0);
    int chunk_rows = 0;
    for (size_t j = i; j < num && chunk_rows < T; ++j) {
      const int left = NumRows(inputs[j], d) - s.rows_done[j];
      const int take = std::min(left, T - chunk_rows);
      if (inputs[j].mask == MaskKind::kBidirectionalPrefix && take < left) break;
      s.piece_begin[j] = s.rows_done[j];
      s.piece_count[j] = take;
      chunk_rows += take;
      if (take < left) break;
    }
    KVFOLD_RETURN_IF_ERROR(ForwardChunk(chunk, result));
    for (size_t k = i; k < num; ++k) s.rows_done[k] += s.piece_count[k];
    while (i < num && s.rows_done[i] == NumRows(inputs[i], d)) ++i;
  }
  return absl::OkStatus();
}

absl::Status Engine::ForwardChunk(const ChunkSpec& chunk, ForwardResult* result) {
  BatchPlan& plan = scratch_->plan;
  KVFOLD_RETURN_IF_ERROR(plan.Place(chunk, *pool_));
  Batch b;
  KVFOLD_RETURN_IF_ERROR(UploadPlan(*scratch_, &b));
  KVFOLD_RETURN_IF_ERROR(Embed(chunk, b));
  for (int l = 0; l < config_.num_layers; ++l) {
    KVFOLD_RETURN_IF_ERROR(Layer(l, b));
    KVFOLD_RETURN_IF_ERROR(CopyHidden(l, b, result));
  }
  KVFOLD_RETURN_IF_ERROR(Logits(*scratch_, b, result));
  KVFOLD_RETURN_IF_ERROR(backend_->Synchronize(*stream_));
  plan.Finish(chunk, *pool_);
  return absl::OkStatus();
}

absl::Status Engine::UploadPlan(Scratch& s, Batch* batch) {
  const BatchPlan& plan = s.plan;
  kernels::Backend& be = *backend_;
  kernels::Stream& st = *stream_;
  const int n = plan.num_rows();
  KVFOLD_RETURN_IF_ERROR(EnsureRopeTable(plan.max_position()));
  Batch& b = *batch;
  b.n = n;
  b.rope = RopeView();
  b.x = s.x.Rows(0, n);
  b.h = s.h.Rows(0, n);
  b.q = s.q.Rows(0, n);
  b.k = s.k.Rows(0, n);
  b.v = s.v.Rows(0, n);
  b.att = s.att.Rows(0, n);
  b.o = s.o.Rows(0, n);
  b.gate = s.gate.Rows(0, n);
  b.up = s.up.Rows(0, n);

  const int64_t num_tables = static_cast<int64_t>(plan.block_tables.size());
  if (num_tables > s.table_capacity || !s.table_buffer) {
    const int64_t cap = std::max<int64_t>(1024, 2 * num_tables);
    auto buf = be.Allocate(cap * sizeof(int32_t));
    if (!buf.ok()) return buf.status();
    s.table_buffer = std::move(*buf);
    s.table_capacity = cap;
  }
  b.tables =
      kernels::ViewOf(*s.table_buffer, 0, core::DType::kI32, {std::max<int64_t>(1, num_tables)});
  if (num_tables > 0) {
    KVFOLD_RETURN_IF_ERROR(
        be.CopyToDevice(st, plan.block_tables.data(), b.tables.Rows(0, num_tables)));
  }
  b.ids = s.ids.Rows(0, n);
  b.slots = s.slots.Rows(0, n);
  b.positions = s.positions.Rows(0, n);
  b.rows = s.rows.Rows(0, n);
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, plan.token_ids.data(), b.ids));
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, plan.slots.data(), b.slots));
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, plan.positions.data(), b.positions));
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, plan.attn.data(), b.rows));
  if (pool_->dtype() == core::DType::kI8) {
    b.own = s.own.Rows(0, n);
    b.pages = s.pages.Rows(0, n);
    KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, plan.own.data(), b.own));
    KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, plan.pages.data(), b.pages));
    if (!plan.seal.empty()) {
      b.seal = s.seal.Rows(0, static_cast<int64_t>(plan.seal.size()));
      KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, plan.seal.data(), b.seal));
    }
  }
  return absl::OkStatus();
}

// Input rows: token embeddings, or the caller's embeddings (memory expansion).
absl::Status Engine::Embed(const ChunkSpec& chunk, const Batch& b) {
  int base = 0;
  for (size_t i = 0; i < chunk.inputs.size(); ++i) {
    const int cnt = chunk.row_count[i];
    if (cnt == 0) continue;
    const SequenceInput& in = chunk.inputs[i];
    if (in.token_ids.empty()) {
      KVFOLD_RETURN_IF_ERROR(backend_->CopyToDevice(
          *stream_,
          in.embeddings.data() + static_cast<size_t>(chunk.row_begin[i]) * chunk.hidden_size,
          b.x.Rows(base, cnt)));
    } else {
      KVFOLD_RETURN_IF_ERROR(
          backend_->Gather(*stream_, weights_->embed, b.ids.Rows(base, cnt), b.x.Rows(base, cnt)));
    }
    base += cnt;
  }
  return absl::OkStatus();
}

// One transformer block over the chunk's rows; x is the residual stream.
// Attention: x += wo(attention(rope(q), kv cache + rope(k))); then the feed-forward.
absl::Status Engine::Layer(int layer, const Batch& b) {
  KVFOLD_RETURN_IF_ERROR(AttentionIn(layer, b));
  KVFOLD_RETURN_IF_ERROR(Attend(layer, b));
  return LayerOut(layer, b);
}

// The attention's inputs: the chunk's rotated queries, its keys and values in the cache.
absl::Status Engine::AttentionIn(int layer, const Batch& b) {
  const Weights::Layer& w = weights_->layers[layer];
  kernels::Backend& be = *backend_;
  kernels::Stream& st = *stream_;
  KVFOLD_RETURN_IF_ERROR(be.RmsNorm(st, b.x, w.attn_norm, config_.rms_norm_eps, b.h));
  const kernels::Backend::MatMulProduct qkv[] = {
      {w.wq, w.bq, b.q}, {w.wk, w.bk, b.k}, {w.wv, w.bv, b.v}};
  KVFOLD_RETURN_IF_ERROR(be.MatMuls(st, b.h, qkv, 3));
  KVFOLD_RETURN_IF_ERROR(be.Rope(st, b.q, b.positions, b.rope, b.q));  // keys: in Attend
  return WriteKv(layer, b);
}

// From the attention output b.att: output projection, residual, feed-forward, residual.
absl::Status Engine::LayerOut(int layer, const Batch& b) {
  const Weights::Layer& w = weights_->layers[layer];
  const float eps = config_.rms_norm_eps;
  kernels::Backend& be = *backend_;
  kernels::Stream& st = *stream_;
  KVFOLD_RETURN_IF_ERROR(be.MatMul(st, b.att, w.wo, kernels::Tensor(), b.o));
  KVFOLD_RETURN_IF_ERROR(be.Add(st, b.x, b.o, b.x));
  // Feed-forward: x += w_down(silu(w_gate h) * w_up h)
  KVFOLD_RETURN_IF_ERROR(be.RmsNorm(st, b.x, w.ffn_norm, eps, b.h));
  const kernels::Backend::MatMulProduct gate_up[] = {{w.w_gate, kernels::Tensor(), b.gate},
                                                     {w.w_up, kernels::Tensor(), b.up}};
  KVFOLD_RETURN_IF_ERROR(be.MatMuls(st, b.h, gate_up, 2));
  KVFOLD_RETURN_IF_ERROR(be.SiluMul(st, b.gate, b.up, b.gate));
  KVFOLD_RETURN_IF_ERROR(be.MatMul(st, b.gate, w.w_down, kernels::Tensor(), b.o));
  return be.Add(st, b.x, b.o, b.x);
}

// The chunk's new keys (un-rotated) and values into the cache at the planned slots.
absl::Status Engine::WriteKv(int layer, const Batch& b) {
  if (pool_->dtype() == core::DType::kI8) {
    return backend_->StoreKvInt8(*stream_, b.k, b.v, b.slots, b.pages, b.seal,
                                 pool_->int8_cache(layer));
  }
  return backend_->StoreKv(*stream_, b.k, b.v, b.slots, pool_->k_cache(layer),
                           pool_->v_cache(layer));
}

kernels::AttentionShape Engine::AttnShape() const {
  kernels::AttentionShape shape;
  shape.num_heads = config_.num_heads;
  shape.num_kv_heads = config_.num_kv_heads;
  shape.head_dim = config_.head_dim;
  shape.block_size = pool_->block_size();
  shape.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  return shape;
}

kernels::Tensor Engine::RopeView() const {
  return kernels::ViewOf(*rope_buffer_, 0, core::DType::kF32, {rope_rows_, config_.head_dim});
}

// Every row's attention over the entries its AttnRow makes visible.
absl::Status Engine::Attend(int layer, const Batch& b) {
  const kernels::AttentionShape shape = AttnShape();
  if (pool_->dtype() == core::DType::kI8) {
    return backend_->AttentionInt8(*stream_, b.q, pool_->int8_cache(layer), b.rows, b.own, b.tables,
                                   b.rope, shape, b.att);
  }
  return backend_->Attention(*stream_, b.q, pool_->k_cache(layer), pool_->v_cache(layer), b.rows,
                             b.tables, b.rope, shape, b.att);
}

// Hidden states: layer l is column block (l - (L - hidden_layers)) of a selected row.
absl::Status Engine::CopyHidden(int layer, const Batch& b, ForwardResult* result) {
  Scratch& s = *scratch_;
  const BatchPlan& plan = s.plan;
  const int from_end = config_.num_layers - layer;  // 1 for the last layer
  if (from_end > plan.max_hidden_layers || plan.hidden.empty()) return absl::OkStatus();
  const int d = config_.hidden_size;
  const int nsel = static_cast<int>(plan.hidden.size());
  s.h_hidden_rows.clear();
  for (const HiddenCopy& h : plan.hidden) s.h_hidden_rows.push_back(h.row);
  kernels::Backend& be = *backend_;
  kernels::Stream& st = *stream_;
  const kernels::Tensor idx = s.sel_idx.Rows(0, nsel), sel = s.sel.Rows(0, nsel);
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_hidden_rows.data(), idx));
  KVFOLD_RETURN_IF_ERROR(be.Gather(st, b.x, idx, sel));
  KVFOLD_RETURN_IF_ERROR(be.CopyToHost(st, sel, s.h_hidden.data()));
  KVFOLD_RETURN_IF_ERROR(be.Synchronize(st));
  for (int r = 0; r < nsel; ++r) {
    const HiddenCopy& h = plan.hidden[r];
    if (from_end > h.layers) continue;
    float* dst =
        result->hidden_storage.data() + (static_cast<size_t>(h.dst) + (h.layers - from_end)) * d;
    std::memcpy(dst, s.h_hidden.data() + static_cast<size_t>(r) * d, d * sizeof(float));
  }
  return absl::OkStatus();
}

// Final norm and logits of the selected rows, in sub-batches of kLogitRows.
absl::Status Engine::Logits(Scratch& s, const Batch& b, ForwardResult* result) {
  const BatchPlan& plan = s.plan;
  const int nsel = static_cast<int>(plan.logit_rows.size());
  if (nsel == 0) return absl::OkStatus();
  kernels::Backend& be = *backend_;
  kernels::Stream& st = *stream_;
  const int vocab = config_.vocab_size;
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, plan.logit_rows.data(), s.sel_idx.Rows(0, nsel)));
  for (int first = 0; first < nsel; first += Scratch::kLogitRows) {
    const int m = std::min(Scratch::kLogitRows, nsel - first);
    const kernels::Tensor sel = s.sel.Rows(0, m), norm = s.sel_norm.Rows(0, m);
    float* host =
        result->logits_storage.data() + (static_cast<size_t>(plan.first_logit_dst) + first) * vocab;
    // A host-addressable backend writes the logits where the caller reads them: at 16
    // decode rows the copy was 2 MB per step on one thread.
    const bool direct = be.HostAddressable();
    const kernels::Tensor logits =
        direct ? kernels::MakeTensor(host, core::DType::kF32, {m, vocab}) : s.logits.Rows(0, m);
    KVFOLD_RETURN_IF_ERROR(be.Gather(st, b.x, s.sel_idx.Rows(first, m), sel));
    KVFOLD_RETURN_IF_ERROR(be.RmsNorm(st, sel, weights_->final_norm, config_.rms_norm_eps, norm));
    KVFOLD_RETURN_IF_ERROR(be.MatMul(st, norm, weights_->lm_head, kernels::Tensor(), logits));
    if (!direct) KVFOLD_RETURN_IF_ERROR(be.CopyToHost(st, logits, host));
  }
  return absl::OkStatus();
}

}  // namespace kvfold::engine
