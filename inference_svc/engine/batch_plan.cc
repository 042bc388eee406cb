// The batch planner (batch_plan.h). Row placement: docs/contracts.md, "Row placement".
#include "inference_svc/engine/batch_plan.h"

#include <algorithm>

namespace kvfold::engine {

namespace {

int NumRows(const SequenceInput& in, int hidden_size) {
  return in.token_ids.empty() ? static_cast<int>(in.embeddings.size() / hidden_size)
                              : static_cast<int>(in.token_ids.size());
}

// Output row of input row `global` (of `total`) under `sel`, or -1 when not selected.
int SelectedRow(RowSelect sel, int global, int total) {
  if (sel == RowSelect::kAll) return global;
  if (sel == RowSelect::kLast && global == total - 1) return 0;
  return -1;
}

}  // namespace

BatchPlan::BatchPlan(int max_rows, bool int8) : int8_(int8) {
  token_ids.resize(max_rows);
  slots.resize(max_rows);
  positions.resize(max_rows);
  attn.resize(max_rows);
  logit_rows.reserve(max_rows);
  hidden.reserve(max_rows);
  if (int8) {
    own.resize(max_rows);
    pages.resize(max_rows);
    seal.reserve(2 * static_cast<size_t>(max_rows));
  }
}

void BatchPlan::SetRow(int r, const KvCache& cache, int prefix_table, int prefix_visible,
                       int main_table, int lo, int hi, int pos) {
  const KvPolicy& pol = cache.policy();
  kernels::AttnRow& row = attn[r];
  row = kernels::AttnRow{};
  row.prefix_table = prefix_table;
  row.prefix_visible = prefix_visible;
  row.prefix_pos_base = pol.prefix_pos_base;
  row.prefix_pos_stride = pol.prefix_pos_stride;
  row.main_table = main_table;
  row.main_front = cache.main_front();
  row.main_lo = lo;
  row.main_hi = hi;
  row.main_pos_lo = hi > lo ? pol.main_pos_base : 0;
  positions[r] = pos;
  max_position_ = std::max<int64_t>(max_position_, pos);
  if (prefix_visible > 0) {
    max_position_ = std::max<int64_t>(
        max_position_, pol.prefix_pos_base + int64_t{prefix_visible - 1} * pol.prefix_pos_stride);
  }
  if (hi > lo) {
    max_position_ = std::max<int64_t>(max_position_, pol.main_pos_base + int64_t{hi - 1 - lo});
  }
}

absl::Status BatchPlan::Place(const ChunkSpec& chunk, BlockPool& pool) {
  const size_t num = chunk.inputs.size();
  num_rows_ = 0;
  max_position_ = 0;
  block_tables.clear();
  seal.clear();
  before_prefix_.assign(num, -1);
  before_main_.assign(num, -1);
  for (size_t i = 0; i < num; ++i) {
    const int cnt = chunk.row_count[i];
    if (cnt == 0) continue;
    const SequenceInput& in = chunk.inputs[i];
    KvCache& cache = *in.cache;
    const KvPolicy& pol = cache.policy();
    const int base = num_rows_;
    // 1. Segment and slot. Memory expansion rows go to the prefix; plain rows to main,
    // except the first auto_prefix_tokens tokens of a sink sequence.
    const bool expansion = in.mask == MaskKind::kBidirectionalPrefix;
    const int to_prefix = expansion ? cnt
                          : cache.main_len() == 0
                              ? std::clamp(pol.auto_prefix_tokens - cache.prefix_len(), 0, cnt)
                              : 0;
    const int to_main = cnt - to_prefix;
    if (pol.window > 0 && to_main > 0) {
      // Main entries no row of this piece can see any more.
      const int first_lo = std::max(0, cache.main_len() + 1 - pol.window);
      if (first_lo > 0) cache.DropFront(first_lo);
    }
    before_prefix_[i] = cache.prefix_len();
    before_main_[i] = cache.main_len();
    const int p0 = cache.prefix_len();
    absl::Status placed = absl::OkStatus();
    if (to_prefix > 0) placed = cache.AppendPrefix(to_prefix, &slots[base]);
    if (placed.ok() && to_main > 0) placed = cache.AppendMain(to_main, &slots[base + to_prefix]);
    if (!placed.ok()) {
      Rollback(chunk);
      return placed;
    }
    const int prefix_table = static_cast<int>(block_tables.size());
    block_tables.insert(block_tables.end(), cache.prefix_blocks().begin(),
                        cache.prefix_blocks().end());
    const int main_table = static_cast<int>(block_tables.size());
    block_tables.insert(block_tables.end(), cache.main_blocks().begin(), cache.main_blocks().end());

    // 2. Position and visibility.
    auto query_pos = [&](int r, int policy_pos) {
      return in.positions.empty() ? policy_pos : in.positions[chunk.row_begin[i] + r];
    };
    for (int r = 0; r < to_prefix; ++r) {
      // Expansion rows see the whole prefix (bidirectional); sink tokens the prefix so far.
      const int visible = expansion ? cache.prefix_len() : p0 + r + 1;
      SetRow(base + r, cache, prefix_table, visible, main_table, 0, 0,
             query_pos(r, pol.prefix_pos_base + (p0 + r) * pol.prefix_pos_stride));
    }
    const int j0 = cache.main_len() - to_main;
    for (int k = 0; k < to_main; ++k) {
      const int j = j0 + k, r = to_prefix + k;
      const int lo = pol.window > 0 ? std::max(0, j + 1 - pol.window) : 0;
      SetRow(base + r, cache, prefix_table, cache.prefix_len(), main_table, lo, j + 1,
             query_pos(r, pol.main_pos_base + (j - lo)));
    }
    if (int8_) PlanInt8(in, base, cnt, before_prefix_[i], pool);
    for (int r = 0; r < cnt; ++r) {
      token_ids[base + r] = in.token_ids.empty() ? 0 : in.token_ids[chunk.row_begin[i] + r];
    }
    num_rows_ += cnt;
  }
  SelectOutputs(chunk);
  return absl::OkStatus();
}

void BatchPlan::PlanInt8(const SequenceInput& in, int base, int count, int prefix_before,
                         const BlockPool& pool) {
  // Each row reads its own block F32 (from the block's page) and every other block int8.
  // A block is quantized (sealed) by the StoreKvInt8 of the chunk that writes its last
  // entry; a partial prefix block when the prefix is complete (memory expansion, or the
  // sink's last token), before any main row can read it.
  const KvCache& cache = *in.cache;
  const int bs = pool.block_size();
  const size_t first_seal = seal.size();
  for (int r = base; r < base + count; ++r) {
    const int32_t block = slots[r] / bs;
    const int32_t page = pool.page_of(block);
    own[r] = kernels::AttnOwnBlock{block, page, 0};
    pages[r] = page;
    if (slots[r] % bs == bs - 1) seal.push_back({block, page, bs});
  }
  const bool expansion = in.mask == MaskKind::kBidirectionalPrefix;
  const bool wrote_prefix = expansion || cache.prefix_len() > prefix_before;
  const bool prefix_complete = expansion || cache.prefix_len() >= cache.policy().auto_prefix_tokens;
  if (wrote_prefix && prefix_complete && cache.prefix_len() % bs != 0) {
    const int32_t block = cache.prefix_blocks().back();
    seal.push_back({block, pool.page_of(block), cache.prefix_len() % bs});
  }
  // A row's own block is sealed when this chunk seals it (this input's seal entries).
  for (int r = base; r < base + count; ++r) {
    for (size_t f = first_seal; f < seal.size(); ++f) {
      if (seal[f].block == own[r].block) own[r].sealed = 1;
    }
  }
}

void BatchPlan::SelectOutputs(const ChunkSpec& chunk) {
  logit_rows.clear();
  hidden.clear();
  first_logit_dst = -1;
  max_hidden_layers = 0;
  int base = 0;
  for (size_t i = 0; i < chunk.inputs.size(); ++i) {
    const int cnt = chunk.row_count[i];
    if (cnt == 0) continue;
    const SequenceInput& in = chunk.inputs[i];
    const int total = NumRows(in, chunk.hidden_size);
    for (int r = 0; r < cnt; ++r) {
      const int global = chunk.row_begin[i] + r;
      // Selected rows of a chunk are consecutive in logits_storage (inputs and rows are
      // visited in order).
      if (const int out = SelectedRow(in.logits, global, total); out >= 0) {
        if (first_logit_dst < 0) first_logit_dst = chunk.logit_row_offset[i] + out;
        logit_rows.push_back(base + r);
      }
      if (const int out = SelectedRow(in.hidden, global, total); out >= 0) {
        hidden.push_back(
            {base + r, chunk.hidden_row_offset[i] + out * in.hidden_layers, in.hidden_layers});
        max_hidden_layers = std::max(max_hidden_layers, in.hidden_layers);
      }
    }
    base += cnt;
  }
}

void BatchPlan::Rollback(const ChunkSpec& chunk) {
  for (size_t i = 0; i < chunk.inputs.size(); ++i) {
    if (before_prefix_[i] >= 0) chunk.inputs[i].cache->Truncate(before_prefix_[i], before_main_[i]);
  }
}

void BatchPlan::Finish(const ChunkSpec& chunk, BlockPool& pool) {
  for (const kernels::SealEntry& s : seal) pool.ReleasePage(s.block);
  for (size_t i = 0; i < chunk.inputs.size(); ++i) {
    if (chunk.row_count[i] == 0) continue;
    KvCache& cache = *chunk.inputs[i].cache;
    const int w = cache.policy().window;
    if (w > 0 && cache.main_len() > w) cache.DropFront(cache.main_len() - w);
  }
}

}  // namespace kvfold::engine
