// Engine: a model's weights on a Backend, the KV BlockPool, and ONE ragged-batch Forward
// that serves every use: prefill, single-token decode, batched decode across sessions
// (the service's continuous batching), and memory expansion (memory modes).
//
// Forward(inputs): each SequenceInput brings a KvCache and new rows (token ids, or input
// embeddings [num_tokens, hidden_size]). For every row the engine
//   - picks its segment and slot: mask kCausal -> the main segment (or the prefix for the
//     first policy.auto_prefix_tokens tokens, sink mode); kBidirectionalPrefix -> the
//     prefix segment (memory expansion: rows see all prefix entries incl. later ones of
//     the same call, and nothing else),
//   - computes its K/V (stored un-rotated) and attends causally over [prefix | main]
//     (whole prefix, main up to itself, limited to the last policy.window entries),
//   - rotates its query by its position (policy rule, or the `positions` override).
// Rows are chunked internally to EngineOptions.max_batch_tokens; every per-row result is
// independent of batching (batch-invariant kernels), so prefill == repeated decode bit
// for bit on the reference backend, and on the optimised CPU backend as well
// (docs/engine.md).
//
// Thread safety: an Engine runs one Forward at a time (callers serialise; the service's
// scheduler owns it). KvCaches must belong to this engine's pool.
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/engine/kv_cache.h"
#include "inference_svc/model/config.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"

namespace kvfold::engine {

struct ChunkSpec;  // batch_plan.h
class PrefillCursor;  // prefill_cursor.h

struct EngineOptions {
  // Rows per internal forward chunk; bounds activation scratch. Default: 256.
  int max_batch_tokens = 256;
  // KV block size in tokens. Default: 16.
  int block_size = 16;
  // Bytes of the KV pool (all layers, K and V). Default: 1 GiB (lazily touched on CPU).
  size_t kv_pool_bytes = size_t{1} << 30;
  // Initial RoPE table rows (grown on demand). 0 = min(max_position_embeddings, 4096).
  int rope_table_rows = 0;
  // KV cache element type. kF16: each K and V value rounded to the nearest fp16 as it is
  // stored, so kv_pool_bytes holds 2x the tokens of kF32 (docs/engine.md "F16 KV").
  // kInt8: KIVI int8 codes (keys per channel over each block, values per token in groups
  // of kv_value_group channels) for window AND prefix (sink, memory) entries;
  // kv_pool_bytes then holds ~3.4x more tokens (docs/engine.md "INT8 KV").
  // Unimplemented at Create on backends without the dtype's KV ops. Default: kF32.
  core::DType kv_dtype = core::DType::kF32;
  // int8: channels per value scale (clamped to kv_dim). Default: 32.
  int kv_value_group = 32;
};

enum class MaskKind { kCausal, kBidirectionalPrefix };
enum class RowSelect { kNone, kLast, kAll };

struct SequenceInput {
  KvCache* cache = nullptr;
  // Exactly one of token_ids / embeddings ([num_tokens, hidden_size], row-major).
  std::span<const int32_t> token_ids;
  std::span<const float> embeddings;
  // Optional [num_tokens] query positions (RoPE of the new rows' queries only; keys always
  // follow the cache's KvPolicy). Empty = the policy's positions.
  std::span<const int32_t> positions;
  MaskKind mask = MaskKind::kCausal;
  RowSelect logits = RowSelect::kLast;
  RowSelect hidden = RowSelect::kNone;
  // 1: the last layer's residual output (before the final norm), [rows, hidden_size].
  // 3: layers L-3, L-2, L-1 concatenated, [rows, 3 * hidden_size] (docs/memory-mode.md).
  int hidden_layers = 1;
};

struct SequenceOutput {
  int num_logit_rows = 0;
  std::span<const float> logits;  // [num_logit_rows, vocab_size]
  int num_hidden_rows = 0;
  std::span<const float> hidden;  // [num_hidden_rows, hidden_layers * hidden_size]
};

// Reuse one ForwardResult across calls: its storage only grows, so a decode loop does not
// allocate after the first step.
struct ForwardResult {
  std::vector<SequenceOutput> outputs;  // one per SequenceInput
  std::vector<float> logits_storage;
  std::vector<float> hidden_storage;
  std::vector<SequenceInput> batch_inputs;  // scratch for AppendBatch (session.h)
};

class Engine {
 public:
  // Uploads the weights of `model` to `backend` (which must outlive the Engine) and
  // allocates the KV pool. InvalidArgument for inconsistent models, ResourceExhausted
  // when the device memory does not suffice.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const model::ModelFile& model,
                                                        kernels::Backend* backend,
                                                        const EngineOptions& options = {});
  ~Engine();

  const model::ModelConfig& config() const { return config_; }
  const std::string& fingerprint() const { return fingerprint_; }
  kernels::Backend& backend() const { return *backend_; }
  BlockPool& pool() const { return *pool_; }
  const EngineOptions& options() const { return options_; }

  std::unique_ptr<KvCache> NewCache(const KvPolicy& policy) const;

  // See the file comment. InvalidArgument for malformed inputs (token id out of range,
  // wrong embedding size, empty input, hidden_layers not 1/3, prefix rows with a window
  // policy); ResourceExhausted when the KV pool is full (the failing sequence's cache is
  // left with the rows of earlier chunks appended).
  absl::Status Forward(std::span<const SequenceInput> inputs, ForwardResult* result);

 private:
  friend class PrefillCursor;  // runs a chunk's layer loop in pieces
  struct Weights;
  struct Scratch;
  Engine() = default;
  struct Batch;  // one chunk's rows on the device (engine_internal.h)
  absl::StatusOr<std::unique_ptr<Scratch>> NewScratch(int max_rows) const;
  // forward.cc: one chunk, as the batch planner placed it, through the layers. A layer is
  // AttentionIn (norm, q k v, rope, kv write), Attend, LayerOut (output projection,
  // residual, feed-forward).
  absl::Status ForwardChunk(const ChunkSpec& chunk, ForwardResult* result);
  absl::Status UploadPlan(Scratch& s, Batch* batch);
  absl::Status Embed(const ChunkSpec& chunk, const Batch& b);
  absl::Status Layer(int layer, const Batch& b);
  absl::Status AttentionIn(int layer, const Batch& b);
  absl::Status LayerOut(int layer, const Batch& b);
  absl::Status WriteKv(int layer, const Batch& b);
  absl::Status Attend(int layer, const Batch& b);
  kernels::AttentionShape AttnShape() const;
  kernels::Tensor RopeView() const;
  absl::Status CopyHidden(int layer, const Batch& b, ForwardResult* result);
  absl::Status Logits(Scratch& s, const Batch& b, ForwardResult* result);
  absl::Status EnsureRopeTable(int64_t max_position);
  absl::Status BuildRopeTable(int64_t rows, int64_t context_len);

  model::ModelConfig config_;
  std::string fingerprint_;
  EngineOptions options_;
  kernels::Backend* backend_ = nullptr;
  std::unique_ptr<kernels::Stream> stream_;
  std::unique_ptr<Weights> weights_;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<kernels::Buffer> rope_buffer_;
  int rope_rows_ = 0;
};

}  // namespace kvfold::engine

#endif  // KVFOLD_INFERENCE_SVC_ENGINE_ENGINE_H_
