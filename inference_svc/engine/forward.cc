// Engine::Forward: the whole transformer pass for a ragged batch of sequences, top to
// bottom. Row placement (segment, slot, position, visibility): docs/contracts.md.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "inference_svc/engine/engine_internal.h"

namespace kvfold::engine {

namespace {

// Output row of input row `global` (of `total`) under `sel`, or -1 when not selected.
int SelectedRow(RowSelect sel, int global, int total) {
  if (sel == RowSelect::kAll) return global;
  if (sel == RowSelect::kLast && global == total - 1) return 0;
  return -1;
}

int NumRows(const SequenceInput& in, int hidden_size) {
  return in.token_ids.empty() ? static_cast<int>(in.embeddings.size() / hidden_size)
                              : static_cast<int>(in.token_ids.size());
}

int Selected(RowSelect sel, int rows) {
  return sel == RowSelect::kAll ? rows : sel == RowSelect::kLast ? 1 : 0;
}

#define KVFOLD_RETURN_IF_ERROR(expr)        \
  do {                                      \
    absl::Status _s = (expr);               \
    if (!_s.ok()) return _s;                \
  } while (0)

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
    if (in.mask == MaskKind::kBidirectionalPrefix && rows > T) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: a bidirectional prefix of ", rows, " rows exceeds max_batch_tokens ", T));
    }
    if (in.mask == MaskKind::kBidirectionalPrefix && in.cache->policy().window > 0 &&
        in.cache->main_len() > 0) {
      return absl::InvalidArgumentError(
          "Forward: prefix rows under a windowed policy need an empty main segment");
    }
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
  std::vector<int>& done = s.piece_offset;  // rows already processed per input
  done.assign(num, 0);
  size_t i = 0;
  while (i < num) {
    std::fill(s.piece_count.begin(), s.piece_count.end(), 0);
    int chunk_rows = 0;
    size_t j = i;
    while (j < num && chunk_rows < T) {
      const int rows = NumRows(inputs[j], d);
      const int left = rows - done[j];
      int take = std::min(left, T - chunk_rows);
      if (inputs[j].mask == MaskKind::kBidirectionalPrefix && take < left) break;
      s.piece_begin[j] = done[j];
      s.piece_count[j] = take;
      chunk_rows += take;
      if (take < left) break;
      ++j;
    }
    KVFOLD_RETURN_IF_ERROR(ForwardChunk(inputs, s.piece_begin, s.piece_count, result));
    for (size_t k = i; k < num; ++k) done[k] += s.piece_count[k];
    while (i < num && done[i] == NumRows(inputs[i], d)) ++i;
  }
  return absl::OkStatus();
}

absl::Status Engine::ForwardChunk(std::span<const SequenceInput> inputs,
                                  std::span<const int> row_begin, std::span<const int> row_count,
                                  ForwardResult* result) {
  const model::ModelConfig& c = config_;
  const int d = c.hidden_size;
  Scratch& s = *scratch_;
  kernels::Backend& be = *backend_;
  kernels::Stream& st = *stream_;
  const size_t num = inputs.size();
  constexpr int F = kernels::kAttnRowFields;

  // 1. Place every row: append K/V slots, fill ids, positions and attention rows.
  const bool int8 = pool_->dtype() == KvDType::kInt8;
  s.h_tables.clear();
  s.h_seal.clear();
  s.before_prefix.assign(num, -1);
  s.before_main.assign(num, -1);
  int n = 0;
  int64_t max_pos = 0;
  absl::Status placed = absl::OkStatus();
  for (size_t i = 0; i < num && placed.ok(); ++i) {
    const int cnt = row_count[i];
    if (cnt == 0) continue;
    const SequenceInput& in = inputs[i];
    KvCache& cache = *in.cache;
    const KvPolicy& pol = cache.policy();
    const int base = n;
    auto fill_row = [&](int r, int prefix_table, int prefix_visible, int main_table, int lo,
                        int hi, int pos_lo, int qpos) {
      int32_t* row = &s.h_rows[static_cast<size_t>(base + r) * F];
      std::fill(row, row + F, 0);
      row[kernels::kAttnPrefixTable] = prefix_table;
      row[kernels::kAttnPrefixVisible] = prefix_visible;
      row[kernels::kAttnPrefixPosBase] = pol.prefix_pos_base;
      row[kernels::kAttnPrefixPosStride] = pol.prefix_pos_stride;
      row[kernels::kAttnMainTable] = main_table;
      row[kernels::kAttnMainFront] = cache.main_front();
      row[kernels::kAttnMainLo] = lo;
      row[kernels::kAttnMainHi] = hi;
      row[kernels::kAttnMainPosLo] = pos_lo;
      if (!in.positions.empty()) qpos = in.positions[row_begin[i] + r];
      s.h_positions[base + r] = qpos;
      max_pos = std::max<int64_t>(max_pos, qpos);
      if (prefix_visible > 0) {
        max_pos = std::max<int64_t>(
            max_pos, pol.prefix_pos_base + int64_t{prefix_visible - 1} * pol.prefix_pos_stride);
      }
      if (hi > lo) max_pos = std::max<int64_t>(max_pos, pos_lo + int64_t{hi - 1 - lo});
    };
    auto push_tables = [&](int* prefix_off, int* main_off) {
      *prefix_off = static_cast<int>(s.h_tables.size());
      s.h_tables.insert(s.h_tables.end(), cache.prefix_blocks().begin(), cache.prefix_blocks().end());
      *main_off = static_cast<int>(s.h_tables.size());
      s.h_tables.insert(s.h_tables.end(), cache.main_blocks().begin(), cache.main_blocks().end());
    };
    if (in.mask == MaskKind::kBidirectionalPrefix) {
      s.before_prefix[i] = cache.prefix_len();
      s.before_main[i] = cache.main_len();
      const int p0 = cache.prefix_len();
      placed = cache.AppendPrefix(cnt, &s.h_slots[base]);
      if (!placed.ok()) break;
      int prefix_off, main_off;
      push_tables(&prefix_off, &main_off);
      for (int r = 0; r < cnt; ++r) {
        fill_row(r, prefix_off, cache.prefix_len(), main_off, 0, 0, 0,
                 pol.prefix_pos_base + (p0 + r) * pol.prefix_pos_stride);
      }
    } else {
      int r = 0;
      // Sink mode: the first auto_prefix_tokens tokens of the sequence become the prefix.
      const int to_prefix = cache.main_len() == 0
                                ? std::clamp(pol.auto_prefix_tokens - cache.prefix_len(), 0, cnt)
                                : 0;
      const int m = cnt - to_prefix;
      // Drop main entries that no row of this piece can see any more.
      if (pol.window > 0 && m > 0) {
        const int first_lo = std::max(0, cache.main_len() + 1 - pol.window);
        if (first_lo > 0) cache.DropFront(first_lo);
      }
      s.before_prefix[i] = cache.prefix_len();
      s.before_main[i] = cache.main_len();
      const int p0 = cache.prefix_len();
      if (to_prefix > 0) placed = cache.AppendPrefix(to_prefix, &s.h_slots[base]);
      if (placed.ok() && m > 0) placed = cache.AppendMain(m, &s.h_slots[base + to_prefix]);
      if (!placed.ok()) {
        cache.Truncate(s.before_prefix[i], s.before_main[i]);
        s.before_prefix[i] = -1;
        break;
      }
      int prefix_off, main_off;
      push_tables(&prefix_off, &main_off);
      for (; r < to_prefix; ++r) {
        fill_row(r, prefix_off, p0 + r + 1, main_off, 0, 0, 0,
                 pol.prefix_pos_base + (p0 + r) * pol.prefix_pos_stride);
      }
      const int j0 = cache.main_len() - m;
      for (int k = 0; k < m; ++k, ++r) {
        const int j = j0 + k;
        const int lo = pol.window > 0 ? std::max(0, j + 1 - pol.window) : 0;
        fill_row(r, prefix_off, cache.prefix_len(), main_off, lo, j + 1, pol.main_pos_base,
                 pol.main_pos_base + (j - lo));
      }
    }
    if (int8) {
      // Int8 KV: each row reads its own block F32 (from the block's page) and every other
      // block int8. A block is quantized (sealed) in the StoreKvInt8 of the chunk that
      // writes its last entry; a partial prefix block when the prefix is complete (memory
      // expansion, or the sink's last token), before any main row can read it.
      const int bs = pool_->block_size();
      const size_t first_seal = s.h_seal.size();
      for (int r = 0; r < cnt; ++r) {
        const int32_t slot = s.h_slots[base + r];
        const int32_t block = slot / bs;
        const int32_t page = pool_->page_of(block);
        int32_t* own = &s.h_own[static_cast<size_t>(base + r) * kernels::kAttnI8Fields];
        own[kernels::kAttnOwnBlock] = block;
        own[kernels::kAttnOwnPage] = page;
        s.h_pages[base + r] = page;
        if (slot % bs == bs - 1) s.h_seal.insert(s.h_seal.end(), {block, page, bs});
      }
      const bool wrote_prefix =
          in.mask == MaskKind::kBidirectionalPrefix || cache.prefix_len() > s.before_prefix[i];
      const bool prefix_complete =
          in.mask == MaskKind::kBidirectionalPrefix || cache.prefix_len() >= pol.auto_prefix_tokens;
      if (wrote_prefix && prefix_complete && cache.prefix_len() % bs != 0) {
        const int32_t block = cache.prefix_blocks().back();
        s.h_seal.insert(s.h_seal.end(), {block, pool_->page_of(block), cache.prefix_len() % bs});
      }
      // A row's own block is sealed when this chunk seals it (this input's seal entries).
      for (int r = 0; r < cnt; ++r) {
        int32_t* own = &s.h_own[static_cast<size_t>(base + r) * kernels::kAttnI8Fields];
        own[kernels::kAttnOwnSealed] = 0;
        for (size_t f = first_seal; f < s.h_seal.size(); f += kernels::kSealFields) {
          if (s.h_seal[f + kernels::kSealBlock] == own[kernels::kAttnOwnBlock]) {
            own[kernels::kAttnOwnSealed] = 1;
          }
        }
      }
    }
    for (int r = 0; r < cnt; ++r) {
      s.h_ids[base + r] = in.token_ids.empty() ? 0 : in.token_ids[row_begin[i] + r];
    }
    n += cnt;
  }
  if (!placed.ok()) {
    for (size_t i = 0; i < num; ++i) {
      if (s.before_prefix[i] >= 0) inputs[i].cache->Truncate(s.before_prefix[i], s.before_main[i]);
    }
    return placed;
  }

  // 2. Upload the row metadata.
  KVFOLD_RETURN_IF_ERROR(EnsureRopeTable(max_pos));
  const Tensor rope = kernels::ViewOf(*rope_buffer_, 0, kernels::DType::kF32,
                                      {rope_rows_, c.head_dim});
  if (static_cast<int64_t>(s.h_tables.size()) > s.table_capacity || !s.table_buffer) {
    const int64_t cap = std::max<int64_t>(1024, 2 * static_cast<int64_t>(s.h_tables.size()));
    auto buf = be.Allocate(cap * sizeof(int32_t));
    if (!buf.ok()) return buf.status();
    s.table_buffer = std::move(*buf);
    s.table_capacity = cap;
  }
  const int64_t num_tables = std::max<int64_t>(1, s.h_tables.size());
  const Tensor tables = kernels::ViewOf(*s.table_buffer, 0, kernels::DType::kI32, {num_tables});
  if (!s.h_tables.empty()) {
    KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_tables.data(), tables.Rows(0, s.h_tables.size())));
  }
  const Tensor ids = s.ids.Rows(0, n), slots = s.slots.Rows(0, n), pos = s.positions.Rows(0, n);
  const Tensor rows = s.rows.Rows(0, n);
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_ids.data(), ids));
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_slots.data(), slots));
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_positions.data(), pos));
  KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_rows.data(), rows));
  Tensor own, pages, seal;
  if (int8) {
    own = s.own.Rows(0, n);
    pages = s.pages.Rows(0, n);
    KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_own.data(), own));
    KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_pages.data(), pages));
    const int64_t num_seal = static_cast<int64_t>(s.h_seal.size()) / kernels::kSealFields;
    if (num_seal > 0) {
      seal = s.seal.Rows(0, num_seal);
      KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_seal.data(), seal));
    }
  }

  // 3. Input rows: token embeddings or caller-provided embeddings.
  const Tensor x = s.x.Rows(0, n), h = s.h.Rows(0, n);
  {
    int base = 0;
    for (size_t i = 0; i < num; ++i) {
      const int cnt = row_count[i];
      if (cnt == 0) continue;
      if (inputs[i].token_ids.empty()) {
        KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(
            st, inputs[i].embeddings.data() + static_cast<size_t>(row_begin[i]) * d,
            x.Rows(base, cnt)));
      } else {
        KVFOLD_RETURN_IF_ERROR(be.Gather(st, weights_->embed, ids.Rows(base, cnt), x.Rows(base, cnt)));
      }
      base += cnt;
    }
  }

  // Rows whose hidden states are wanted, and where they go.
  s.hidden_src.clear();
  s.hidden_dst.clear();
  s.hidden_col.clear();
  int max_hidden_layers = 0;
  {
    int base = 0;
    for (size_t i = 0; i < num; ++i) {
      const int cnt = row_count[i];
      if (cnt == 0) continue;
      const SequenceInput& in = inputs[i];
      const int total = NumRows(in, d);
      for (int r = 0; r < cnt; ++r) {
        const int global = row_begin[i] + r;
        const int out_row = SelectedRow(in.hidden, global, total);
        if (out_row < 0) continue;
        s.hidden_src.push_back(base + r);
        s.hidden_dst.push_back(s.hidden_row_offset[i] * 1 + out_row * in.hidden_layers);
        s.hidden_col.push_back(in.hidden_layers);
        max_hidden_layers = std::max(max_hidden_layers, in.hidden_layers);
      }
      base += cnt;
    }
  }

  // 4. The layers.
  kernels::AttentionShape ash;
  ash.num_heads = c.num_heads;
  ash.num_kv_heads = c.num_kv_heads;
  ash.head_dim = c.head_dim;
  ash.block_size = pool_->block_size();
  ash.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const Tensor q = s.q.Rows(0, n), k = s.k.Rows(0, n), v = s.v.Rows(0, n);
  const Tensor att = s.att.Rows(0, n), o = s.o.Rows(0, n);
  const Tensor gate = s.gate.Rows(0, n), up = s.up.Rows(0, n);
  for (int l = 0; l < c.num_layers; ++l) {
    const Weights::Layer& w = weights_->layers[l];
    KVFOLD_RETURN_IF_ERROR(be.RmsNorm(st, x, w.attn_norm, c.rms_norm_eps, h));
    KVFOLD_RETURN_IF_ERROR(be.MatMul(st, h, w.wq, w.bq, q));
    KVFOLD_RETURN_IF_ERROR(be.MatMul(st, h, w.wk, w.bk, k));
    KVFOLD_RETURN_IF_ERROR(be.MatMul(st, h, w.wv, w.bv, v));
    if (int8) {
      const kernels::KvCacheI8 cache = pool_->int8_cache(l);
      KVFOLD_RETURN_IF_ERROR(be.StoreKvInt8(st, k, v, slots, pages, seal, cache));
      KVFOLD_RETURN_IF_ERROR(be.Rope(st, q, pos, rope, q));
      KVFOLD_RETURN_IF_ERROR(be.AttentionInt8(st, q, cache, rows, own, tables, rope, ash, att));
    } else {
      const Tensor kc = pool_->k_cache(l), vc = pool_->v_cache(l);
      KVFOLD_RETURN_IF_ERROR(be.StoreKv(st, k, v, slots, kc, vc));
      KVFOLD_RETURN_IF_ERROR(be.Rope(st, q, pos, rope, q));
      KVFOLD_RETURN_IF_ERROR(be.Attention(st, q, kc, vc, rows, tables, rope, ash, att));
    }
    KVFOLD_RETURN_IF_ERROR(be.MatMul(st, att, w.wo, Tensor(), o));
    KVFOLD_RETURN_IF_ERROR(be.Add(st, x, o, x));
    KVFOLD_RETURN_IF_ERROR(be.RmsNorm(st, x, w.ffn_norm, c.rms_norm_eps, h));
    KVFOLD_RETURN_IF_ERROR(be.MatMul(st, h, w.w_gate, Tensor(), gate));
    KVFOLD_RETURN_IF_ERROR(be.MatMul(st, h, w.w_up, Tensor(), up));
    KVFOLD_RETURN_IF_ERROR(be.SiluMul(st, gate, up, gate));
    KVFOLD_RETURN_IF_ERROR(be.MatMul(st, gate, w.w_down, Tensor(), o));
    KVFOLD_RETURN_IF_ERROR(be.Add(st, x, o, x));

    // Hidden states: layer l is column block (l - (L - hidden_layers)) of a row.
    const int from_end = c.num_layers - l;  // 1 for the last layer
    if (from_end <= max_hidden_layers && !s.hidden_src.empty()) {
      const int nsel = static_cast<int>(s.hidden_src.size());
      KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.hidden_src.data(), s.sel_idx.Rows(0, nsel)));
      KVFOLD_RETURN_IF_ERROR(be.Gather(st, x, s.sel_idx.Rows(0, nsel), s.sel.Rows(0, nsel)));
      KVFOLD_RETURN_IF_ERROR(be.CopyToHost(st, s.sel.Rows(0, nsel), s.h_hidden.data()));
      KVFOLD_RETURN_IF_ERROR(be.Synchronize(st));
      for (int r = 0; r < nsel; ++r) {
        const int layers = s.hidden_col[r];
        if (from_end > layers) continue;
        const int col = layers - from_end;
        float* dst = result->hidden_storage.data() +
                     (static_cast<size_t>(s.hidden_dst[r]) + col) * d;
        std::memcpy(dst, s.h_hidden.data() + static_cast<size_t>(r) * d, d * sizeof(float));
      }
    }
  }

  // 5. Logits for the selected rows, in sub-batches. Selected rows of a chunk are
  // consecutive in logits_storage (inputs and rows are visited in order).
  int first_dst = -1;
  int nsel = 0;
  {
    int base = 0;
    for (size_t i = 0; i < num; ++i) {
      const int cnt = row_count[i];
      if (cnt == 0) continue;
      const SequenceInput& in = inputs[i];
      const int total = NumRows(in, d);
      for (int r = 0; r < cnt; ++r) {
        const int global = row_begin[i] + r;
        const int out_row = SelectedRow(in.logits, global, total);
        if (out_row < 0) continue;
        if (first_dst < 0) first_dst = s.logit_row_offset[i] + out_row;
        s.h_sel[nsel++] = base + r;
      }
      base += cnt;
    }
  }
  if (nsel > 0) {
    KVFOLD_RETURN_IF_ERROR(be.CopyToDevice(st, s.h_sel.data(), s.sel_idx.Rows(0, nsel)));
    for (int b = 0; b < nsel; b += Scratch::kLogitRows) {
      const int m = std::min(Scratch::kLogitRows, nsel - b);
      const Tensor sel = s.sel.Rows(0, m), norm = s.sel_norm.Rows(0, m);
      const Tensor logits = s.logits.Rows(0, m);
      KVFOLD_RETURN_IF_ERROR(be.Gather(st, x, s.sel_idx.Rows(b, m), sel));
      KVFOLD_RETURN_IF_ERROR(be.RmsNorm(st, sel, weights_->final_norm, c.rms_norm_eps, norm));
      KVFOLD_RETURN_IF_ERROR(be.MatMul(st, norm, weights_->lm_head, Tensor(), logits));
      KVFOLD_RETURN_IF_ERROR(be.CopyToHost(
          st, logits,
          result->logits_storage.data() + (static_cast<size_t>(first_dst) + b) * c.vocab_size));
    }
  }
  KVFOLD_RETURN_IF_ERROR(be.Synchronize(st));
  // Int8: blocks sealed in this chunk are int8 from now on for every row.
  for (size_t f = 0; f < s.h_seal.size(); f += kernels::kSealFields) {
    pool_->ReleasePage(s.h_seal[f + kernels::kSealBlock]);
  }
  // Windowed policies keep only the last `window` main entries between calls.
  for (size_t i = 0; i < num; ++i) {
    if (row_count[i] == 0) continue;
    KvCache& cache = *inputs[i].cache;
    const int w = cache.policy().window;
    if (w > 0 && cache.main_len() > w) cache.DropFront(cache.main_len() - w);
  }
  return absl::OkStatus();
}

}  // namespace kvfold::engine
