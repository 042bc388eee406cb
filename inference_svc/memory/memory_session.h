// Memory mode: a KV window plus a fixed block of M memory vectors into which evicted
// history is folded by the MemoryProjector. The algorithm, implemented once here, is
// specified in docs/memory-mode.md; the PyTorch student (tools/train_projector) mirrors it.
//
//   state      (mem [0 or M, d], window ids w, at most W + C)  -- everything else derived
//   memory KV  mem fed as input embeddings, all at position 0, bidirectional among
//              themselves, attending to nothing else -> the cache's prefix segment
//   window     token i at position i + 1, sees all of mem and window tokens 0..i;
//              its K/V and hidden states are always exactly Forward(mem, w)
//   fold       before feeding a token when |w| == W + C: H = hidden(oldest C);
//              mem <- fp16(Projector(concat(mem, H))); drop those C ids; expand mem;
//              re-prefill the remaining W ids (W/C extra prefill tokens per token)
//   prompts    go through the same loop (chunks of at most W + C - |w| tokens)
//   modes      memory (W from the projector) and memory_only (W = 0)
//   policy     the projector's window policy: growing (above) or sliding, where the cache
//              keeps only the last W window entries (each row sees mem + its last W
//              tokens) while w still holds up to W + C ids; resident KV <= M + W
//   sinks      the projector's sink_tokens S: the session's first S ids stay resident in
//              front of the memory (prefix = [S sinks, causal, position 0; M memory]) and
//              are never folded; w is the stream after them; a fold re-derives all three
//   memory K/V the projector's optional per-layer maps of mem, added to the expanded
//              memory's cache rows (docs/memory-mode.md "Per-layer memory K/V")
//
// Because the state is exactly (mem, w) and mem is kept fp16-representable, ExportState +
// ImportState on a fresh engine continue bit for bit (batch-invariant engine kernels).
#ifndef KVFOLD_INFERENCE_SVC_MEMORY_MEMORY_SESSION_H_
#define KVFOLD_INFERENCE_SVC_MEMORY_MEMORY_SESSION_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/kv_cache.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/projector.h"
#include "kernels/backend.h"

namespace kvfold::memory {

struct MemorySessionOptions {
  // kMemory or kMemoryOnly.
  core::KvMode mode = core::KvMode::kMemory;
  // Round every new memory to fp16 (the default block dtype) so that checkpoints in the
  // default format restore bit for bit. false keeps the projector's fp32 output (then only
  // an fp32 block restores exactly). Default: true.
  bool fp16_memory = true;
};

// Cumulative counters, for usage reports and the benchmark.
struct MemorySessionStats {
  int64_t num_folds = 0;
  int64_t refill_tokens = 0;   // sink and window tokens re-prefilled after folds
  double fold_seconds = 0.0;   // projector + memory expansion + window re-prefill
  double projector_seconds = 0.0;  // of which the projector
  double expand_seconds = 0.0;     // of which the memory expansion
};

class MemorySession final : public engine::Session {
 public:
  // `engine` and `projector` must outlive the session.
  // INVALID_ARGUMENT: mode is not a memory mode, the projector needs more layers than the
  // model has, or its prefix gap puts window tokens past max_position_embeddings. FAILED_PRECONDITION: the projector was made for another model.
  // UNIMPLEMENTED: per-layer memory K/V maps with an int8 KV cache or a device backend.
  static absl::StatusOr<std::unique_ptr<MemorySession>> Create(engine::Engine* engine,
                                                               const Projector* projector,
                                                               const MemorySessionOptions& options);

  core::KvMode mode() const override { return mode_; }
  absl::Status Prefill(std::span<const int32_t> token_ids) override;
  absl::Status Append(int32_t token_id) override;
  std::span<const float> Logits() const override;
  int64_t TotalTokens() const override { return total_tokens_; }
  int64_t ResidentTokens() const override { return cache_->resident_tokens(); }
  size_t KvBytesResident() const override { return cache_->ResidentBytes(); }
  absl::StatusOr<engine::SessionState> ExportState() const override;
  // On a fresh session: prefill the sink ids, expand mem, prefill the window ids.
  // FAILED_PRECONDITION if tokens were fed already; INVALID_ARGUMENT if the state's mode,
  // W, C, S, M or d differ from this session's, its window is longer than W + C, it holds
  // window ids before all S sinks, or an id is out of range.
  absl::Status ImportState(const engine::SessionState& state) override;
  // Whole sessions only (their entries depend on the tokens folded before a cut).
  absl::Status CopyPrefixFrom(const engine::Session& other, int64_t tokens) override;
  absl::Status PrepareAppend(int32_t token_id, engine::SequenceInput* input) override;
  absl::Status FinishAppend(const engine::SequenceOutput& output) override;

  // The cache policy of a memory-mode session: KvPolicy::Memory(), windowed to W under the
  // sliding window policy (memory mode only), the first S tokens into the prefix.
  static engine::KvPolicy CachePolicy(core::KvMode mode, const ProjectorConfig& config);

  int window_size() const { return window_size_; }  // W
  int chunk_size() const { return chunk_size_; }    // C
  int64_t tokens_folded() const { return tokens_folded_; }
  int sink_tokens() const { return sink_tokens_; }  // S
  std::span<const int32_t> sink_token_ids() const { return sinks_; }
  std::span<const int32_t> window_token_ids() const { return window_; }
  // [0 or M, d]: empty before the first fold.
  std::span<const float> memory() const { return memory_; }
  const MemorySessionStats& stats() const { return stats_; }

 private:
  MemorySession(engine::Engine* engine, const Projector* projector,
                const MemorySessionOptions& options);
  absl::Status CheckIds(std::span<const int32_t> token_ids) const;
  // Re-derives the caches from (mem, w) after a failed fold left them incomplete.
  absl::Status RebuildIfStale();
  // Step 4: fold the oldest C window tokens when the window holds W + C.
  absl::Status FoldIfFull();
  // Step 2: the memory's K/V into the (cleared) cache's prefix segment, plus the
  // projector's per-layer memory K/V maps when it has them (AddMemoryKv).
  absl::Status ExpandMemory();
  absl::Status AddMemoryKv();
  // FAILED_PRECONDITION: maps for another layer count or K/V width; UNIMPLEMENTED: an int8
  // KV cache or a device backend.
  static absl::Status CheckMemoryKv(const engine::Engine& engine, const ProjectorConfig& pc);
  // The K/V of sink ids (the first S tokens: into the prefix, causal, position 0). The
  // caller keeps sinks_ in sync.
  absl::Status ForwardSinks(std::span<const int32_t> ids, engine::RowSelect logits);
  // Step 3: appends the K/V of `ids` = window entries [first, first + n) to the cache,
  // keeping the hidden rows of entries < C and the logits `logits` selects (TakeLogits).
  // The caller keeps window_ in sync.
  absl::Status ForwardWindow(std::span<const int32_t> ids, int first, engine::RowSelect logits);
  // The logits of a forward of `fed` rows that selected `logits`: the last row kept as
  // Logits(); with kAll, every row to the prompt observer first.
  absl::Status TakeLogits(const engine::SequenceOutput& out, engine::RowSelect logits, size_t fed);
  // Copies hidden rows [0, num_rows) of `output` (window entries first..) into chunk_hidden_.
  void KeepHidden(const engine::SequenceOutput& output, int first);

  engine::Engine* engine_;
  const Projector* projector_;
  core::KvMode mode_;
  bool fp16_memory_;
  int window_size_, chunk_size_, mem_slots_, hidden_size_, vocab_size_;
  int input_layers_, hidden_width_;  // hidden_width_ = input_layers * hidden_size
  int sink_tokens_;                  // S

  std::unique_ptr<engine::KvCache> cache_;
  std::vector<float> memory_;        // [0 or M, d]
  std::vector<int32_t> sinks_;       // the first S ids of the session; capacity S
  std::vector<int32_t> window_;      // window ids, oldest first; capacity W + C
  std::vector<float> chunk_hidden_;  // [C, hidden_width]: hidden rows of window entries < C
  std::vector<float> logits_;        // [vocab_size]
  bool has_logits_ = false;
  bool cache_stale_ = false;  // caches not yet Forward(mem, w) (a fold failed midway)
  int64_t total_tokens_ = 0;
  int64_t tokens_folded_ = 0;
  MemorySessionStats stats_;

  // Reused buffers: the steady-state decode loop does not allocate.
  engine::ForwardResult result_;
  ProjectorScratch projector_scratch_;
  std::vector<float> new_memory_;    // [M, d]
  std::vector<float> memory_kv_;     // [L, 2, M, kv_dim]: the maps' additions (AddMemoryKv)
  std::vector<float> kv_rows_;       // [L, 2, M, kv_dim]: the memory's cache rows on the host
  std::unique_ptr<kernels::Stream> kv_stream_;
  int32_t pending_token_ = 0;        // PrepareAppend -> FinishAppend
  bool pending_hidden_ = false;
  bool pending_sink_ = false;
};

// The one factory for every KV mode, for the CLI (`kvfold generate|logits`) and the
// service: full/sliding/sink -> engine::CreatePlainSession; memory/memory_only ->
// MemorySession with `projector` (W, C, M come from the projector; options.window_size is
// ignored for memory modes). INVALID_ARGUMENT: memory mode without a projector, bad
// geometry. FAILED_PRECONDITION: projector made for another model. fp16_memory: see
// MemorySessionOptions (false only for fp32 parity tests; plain modes ignore it).
absl::StatusOr<std::unique_ptr<engine::Session>> CreateSession(engine::Engine* engine,
                                                               const engine::SessionOptions& options,
                                                               const Projector* projector,
                                                               bool fp16_memory = true);

}  // namespace kvfold::memory

#endif  // KVFOLD_INFERENCE_SVC_MEMORY_MEMORY_SESSION_H_
