// Session: one conversation's decoding state, the same interface for every KV mode, so
// the service treats all modes alike.
//
//   full / sliding / sink   CreatePlainSession() here (engine/plain_session.cc)
//   memory / memory_only    the memory-mode session (inference_svc/memory/) implements
//                           this same abstract class; its factory lives there.
//
// A session's persistent state is SessionState (maps 1:1 onto MemoryBlockHeader fields):
// ExportState() on one replica + ImportState() on a fresh session of another replica
// continues the session. For full mode this is exact; for sliding/sink the window's K/V
// are recomputed from the window ids (the old K/V depended on evicted tokens), so import
// is exact only while nothing has been evicted; memory modes are exact by construction.
//
// Batched decode across sessions (continuous batching):
//   for each session: s->PrepareAppend(id, &inputs[i]);
//   engine.Forward(inputs, &result);
//   for each session: s->FinishAppend(result.outputs[i]);
// AppendBatch() does exactly this. PrepareAppend may not allocate on the steady state.
#ifndef KVFOLD_INFERENCE_SVC_ENGINE_SESSION_H_
#define KVFOLD_INFERENCE_SVC_ENGINE_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_mode.h"
#include "inference_svc/engine/engine.h"

namespace kvfold::engine {

// Sessions speak the shared KV mode (core/kv_mode.h: the enum, its names and parser).
using core::KvMode;

struct SessionOptions {
  KvMode mode = KvMode::kFull;
  int window_size = 1024;  // sliding/sink: visible main entries incl. the current token
  int sink_tokens = 4;     // sink
};

struct SessionState {
  KvMode mode = KvMode::kFull;
  int window_size = 0;
  int sink_tokens = 0;
  int chunk_size = 0;          // memory modes
  int64_t total_tokens = 0;    // tokens ever fed
  int64_t tokens_folded = 0;   // memory modes
  std::vector<int32_t> window_token_ids;  // resident main-segment ids, oldest first
  std::vector<int32_t> sink_token_ids;    // sink mode
  int mem_slots = 0;                      // memory modes
  std::vector<float> memory;              // [mem_slots, hidden_size]
};

class Session {
 public:
  virtual ~Session() = default;

  virtual KvMode mode() const = 0;
  // Feeds tokens (prompt or any length; chunked internally). On success Logits() are
  // those after the last token. InvalidArgument for out-of-range ids or empty input.
  virtual absl::Status Prefill(std::span<const int32_t> token_ids) = 0;
  // Prefill in pieces of bounded work (engine/prefill_cursor.h): StartPrefill begins
  // feeding token_ids (the span must stay valid until it is fed); each ContinuePrefill
  // runs pieces until the tokens are fed or about budget_ms has passed (at least one
  // piece) and returns true once they are: Logits() and the state are then Prefill's,
  // bit for bit. Other sessions may run between the calls; this one may not. On an error
  // the session is unusable (drop it). The default feeds Prefill chunks of whole tokens
  // sized to the budget by the time per token measured so far (a 16-token probe first,
  // at most 256 tokens): its unit is a token, not a piece of one.
  virtual absl::Status StartPrefill(std::span<const int32_t> token_ids);
  virtual absl::StatusOr<bool> ContinuePrefill(double budget_ms);
  // Feeds one token (decode step).
  virtual absl::Status Append(int32_t token_id);

  // Prompt rows' logits, for scoring a prompt: while an observer is set, every token that
  // Prefill or StartPrefill / ContinuePrefill feed hands the logits after it
  // ([vocab_size]) to the observer, in the order fed, before the call returns; the
  // classifier then runs for every row, in forwards of at most kObservedRows rows. The
  // rows equal the logits the same tokens fed one at a time would give, bit for bit
  // (docs/contracts.md, "Bitwise rule"). Decode steps and ImportState never call it. An
  // empty observer stops observing.
  using RowLogitsObserver = std::function<void(std::span<const float> logits)>;
  static constexpr int kObservedRows = 64;
  void ObservePrefillRows(RowLogitsObserver observer) { row_observer_ = std::move(observer); }
  // Logits after the last fed token [vocab_size]; empty before the first token.
  virtual std::span<const float> Logits() const = 0;

  virtual int64_t TotalTokens() const = 0;     // all tokens ever fed
  virtual int64_t ResidentTokens() const = 0;  // entries whose K/V are resident
  virtual size_t KvBytesResident() const = 0;  // KV pool bytes held

  virtual absl::StatusOr<SessionState> ExportState() const = 0;
  // On a fresh session only (FailedPrecondition otherwise); InvalidArgument when the
  // state's mode/geometry do not match this session's options.
  virtual absl::Status ImportState(const SessionState& state) = 0;

  // Makes this fresh session continue exactly as `other` would: the same entries (its KV
  // blocks copied, the same bits), ids, logits and counts, without feeding a token.
  // `other` must be a session of the same kind, mode and geometry on the same engine, with
  // no prompt in flight (StartPrefill not yet finished); it is not changed. A runtime
  // feeds a prompt shared by several turns once and copies it to the others. Errors:
  // FailedPrecondition (this session holds tokens, `other` has a prompt in flight, or
  // its kind, mode or geometry differ), ResourceExhausted (the KV pool has too few free
  // blocks; this session stays fresh); Unimplemented where a kind has no copy.
  absl::Status CopyFrom(const Session& other) { return CopyPrefixFrom(other, other.TotalTokens()); }
  // CopyFrom of `other`'s first `tokens` tokens (all of them: CopyFrom): this session then
  // continues as a session fed only those would, except that Logits() stay empty until it
  // is fed a token when `tokens` is less than all (the logits after them were not kept).
  // Fewer than all in full mode, and in sliding and sink modes while `other` has evicted
  // nothing and `tokens` passes its sink tokens (FailedPrecondition otherwise, and in
  // memory modes, whose entries depend on tokens evicted or folded since; with INT8 KV
  // unless the cut ends a KV block of the main segment) and at least 1; the other errors
  // are CopyFrom's.
  virtual absl::Status CopyPrefixFrom(const Session& other, int64_t tokens) {
    return absl::UnimplementedError("this session cannot copy another");
  }

  // Batched decode hooks (see the file comment). `input` stays valid until FinishAppend.
  virtual absl::Status PrepareAppend(int32_t token_id, SequenceInput* input) = 0;
  virtual absl::Status FinishAppend(const SequenceOutput& output) = 0;

 protected:
  const RowLogitsObserver& row_observer() const { return row_observer_; }
  // A prompt started in pieces is not all fed yet (here: the default StartPrefill's).
  virtual bool PrefillInFlight() const { return pending_fed_ < pending_prefill_.size(); }
  // The checks every CopyPrefixFrom makes besides its kind's: this session is fresh,
  // `other` has no prompt in flight, `tokens` is all of other's or in [1, all).
  absl::Status CheckCopy(const Session& other, int64_t tokens) const;
  // Hands each of `output`'s logit rows to the observer.
  void ObserveRows(const SequenceOutput& output) const;

 private:
  RowLogitsObserver row_observer_;
  // The default StartPrefill's tokens, how many are fed, and the last chunk's ms per token.
  std::span<const int32_t> pending_prefill_;
  size_t pending_fed_ = 0;
  double prefill_ms_per_token_ = 0;
};

// full, sliding or sink; InvalidArgument for memory modes (use memory::CreateSession) or bad
// geometry (window_size < 1, sink_tokens < 0).
absl::StatusOr<std::unique_ptr<Session>> CreatePlainSession(Engine* engine,
                                                            const SessionOptions& options);

// One decode step for several sessions as one ragged Forward. ids[i] goes to sessions[i].
absl::Status AppendBatch(Engine& engine, std::span<Session* const> sessions,
                         std::span<const int32_t> token_ids, ForwardResult* scratch);

}  // namespace kvfold::engine

#endif  // KVFOLD_INFERENCE_SVC_ENGINE_SESSION_H_
