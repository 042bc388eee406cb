// The batch planner of Engine::Forward: places every row of one chunk (a ragged batch of
// sequences' rows) in its sequence's KV cache and writes the per-row records the layer
// loop and the attention kernels read. Row placement (segment, slot, position,
// visibility): docs/contracts.md, "Row placement"; INT8 KV own blocks and sealing:
// docs/engine.md, "INT8 KV".
//
// Host memory only: the engine uploads the arrays to the device. Every array is sized for
// max_rows rows at construction, the block tables and the seal list only grow, so a
// steady decode loop plans without allocating.
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_BATCH_PLAN_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_BATCH_PLAN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/kv_cache.h"
#include "kernels/attn_rows.h"

namespace kvfold::engine {

// Where a chunk's rows come from and where their outputs go.
struct ChunkSpec {
  std::span<const SequenceInput> inputs;
  std::span<const int> row_begin;  // [inputs] first row of each input in this chunk
  std::span<const int> row_count;  // [inputs] rows of each input in this chunk (0 = none)
  // [inputs] output row of each input's first selected row in ForwardResult (logits in
  // rows of vocab_size, hidden states in rows of hidden_size).
  std::span<const int> logit_row_offset;
  std::span<const int> hidden_row_offset;
  int hidden_size = 0;
};

// A selected row's hidden state: chunk row `row` goes to rows [dst, dst + layers) of
// ForwardResult::hidden_storage (in hidden_size units), layer L - layers + c into dst + c.
struct HiddenCopy {
  int32_t row;
  int32_t dst;
  int32_t layers;
};

class BatchPlan {
 public:
  // max_rows: EngineOptions::max_batch_tokens. int8: the pool is INT8 KV (own blocks,
  // pages and seal entries are planned too).
  BatchPlan(int max_rows, bool int8);

  // Appends a KV slot for every row of the chunk to its sequence's cache and fills the
  // arrays below. ResourceExhausted when the pool runs out of blocks (or pages): every
  // cache of the chunk is then rolled back to its state before the call.
  absl::Status Place(const ChunkSpec& chunk, BlockPool& pool);

  // After the chunk ran: blocks this chunk sealed drop their F32 pages (int8 from now on
  // for every row), and windowed caches keep only their last `window` main entries.
  void Finish(const ChunkSpec& chunk, BlockPool& pool);
  // Instead of Finish, for a chunk that will not complete: every cache of the chunk back
  // to its state before Place.
  void Abandon(const ChunkSpec& chunk) { Rollback(chunk); }

  int num_rows() const { return num_rows_; }
  // The largest position any query or visible key of the chunk has (sizes the RoPE table).
  int64_t max_position() const { return max_position_; }

  // Per chunk row, [num_rows()] (row r of input i is row sum(row_count[<i]) + r).
  std::vector<int32_t> token_ids;          // 0 for embedding rows
  std::vector<int32_t> slots;              // physical KV slot of the row's own entry
  std::vector<int32_t> positions;          // the query's RoPE position
  std::vector<kernels::AttnRow> attn;      // what the row attends to
  std::vector<kernels::AttnOwnBlock> own;  // INT8: the row's own block and its page
  std::vector<int32_t> pages;              // INT8: the page of the row's own block
  // Per chunk:
  std::vector<kernels::SealEntry> seal;  // INT8: blocks the chunk's StoreKvInt8 quantizes
  std::vector<int32_t> block_tables;     // every sequence's prefix and main block tables
  std::vector<int32_t> logit_rows;       // chunk rows whose logits are wanted, in order
  int first_logit_dst = 0;               // ForwardResult logits row of logit_rows[0]
  std::vector<HiddenCopy> hidden;        // chunk rows whose hidden states are wanted
  int max_hidden_layers = 0;

 private:
  // Fills row `r` (chunk index) from its visible range and query position.
  void SetRow(int r, const KvCache& cache, int prefix_table, int prefix_visible, int main_table,
              int lo, int hi, int pos);
  // INT8: own blocks, pages and the seal entries of one input's rows [base, base + count).
  void PlanInt8(const SequenceInput& in, int base, int count, int prefix_before,
                const BlockPool& pool);
  void SelectOutputs(const ChunkSpec& chunk);
  void Rollback(const ChunkSpec& chunk);

  bool int8_;
  int num_rows_ = 0;
  int64_t max_position_ = 0;
  // Per input: cache lengths before Place (-1: untouched), for Rollback.
  std::vector<int> before_prefix_, before_main_;
};

}  // namespace kvfold::engine

#endif  // KVFOLD_INFERENCE_SVC_ENGINE_BATCH_PLAN_H_
