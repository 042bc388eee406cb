// Scheduler: ONE thread that owns the engine and runs every turn on this replica.
//
// Each loop iteration (a step) does, in order:
//   1. destroys retired engine sessions (their KV blocks return to the pool),
//   2. admits queued turns (up to max_active_sessions): a turn's KV reservation
//      (TurnJob::reserve_blocks) must fit the pool next to the reservations of running
//      turns and the blocks idle sessions hold; idle sessions are evicted least recently
//      used first to make room; a turn that still does not fit ends with
//      RESOURCE_EXHAUSTED and a retry-after hint (RetryAfter()) before any work,
//   3. starts every new turn: creates its engine session, or imports the state it resumes
//      (a full-mode state is not imported at once: its ids are replayed as prompt chunks),
//   4. prompt work under a time budget, shortest remaining prompt first: a prompt whose
//      rest fits the step's budget (prefill_stall x the decode step, both measured) runs
//      whole, like a decode token; longer prompts (and full-mode replays) are fed in
//      pieces of bounded work (engine::PrefillCursor: between layers and between slices
//      of a layer's attention keys) for as long as the prompt time the decode steps
//      earned lasts, and wait while the prompt work already done is not paid for by
//      decode steps (prompt time <= prefill_stall x decode time). A long prompt
//      therefore delays other sessions' tokens by at most about (1 + prefill_stall)x,
//      whatever its length and context,
//      A member of a prompt share (TurnJob::share) waits for the share's other members
//      to be admitted, then while one of them feeds the prompt, and copies that member's
//      session (engine::Session::CopyFrom) in the step the prompt is fed instead of
//      feeding it again. An ephemeral turn's prompt that starts with tokens a finished
//      ephemeral session of the same caller (tenant and credential) and geometry fed
//      (the prefix cache: the last prefix_cache_entries such sessions, idle, their KV
//      blocks counted like an idle session's and dropped first) copies that session's
//      entries for them (engine::Session::CopyPrefixFrom) and feeds only the rest,
//   5. ONE decode step for EVERY decoding turn: with batching on, a single ragged Forward
//      over all of them (engine::AppendBatch); with batching off, one Forward per session.
// Every sampled token is fed back into its session, the last one too, so a finished turn's
// state includes everything it emitted. A turn's stream ends OK (final_state exported) or
// with an error; a cancelled turn ends with CANCELLED. No engine work runs elsewhere.
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_SCHEDULER_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_SCHEDULER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/runtime/kv_reservation.h"
#include "inference_svc/runtime/live_session.h"
#include "inference_svc/runtime/prefill_cost.h"

namespace kvfold::runtime {

struct SchedulerOptions {
  // Batch all decoding turns into one forward per step. Default: true.
  bool batching = true;
  // Largest prompt chunk per turn and step. Default: 256.
  int prefill_chunk_tokens = 256;
  // Prompt work per step is budgeted at this many decode steps' time, and over time
  // takes at most this multiple of the decode time, so other turns' per-token latency
  // grows by at most about (1 + prefill_stall)x. 0 = every prefilling turn takes a
  // prefill_chunk_tokens chunk each step. Default: 1.
  double prefill_stall = 1.0;
  // Turns running at once; more wait in the queue. Default: 64.
  int max_active_sessions = 64;
  // Finished ephemeral sessions kept for their prompts' prefixes (the prefix cache, below);
  // 0 = off. Default: 16.
  int prefix_cache_entries = 16;
};

// The retry-after hint a RESOURCE_EXHAUSTED status from the runtime carries, if any.
std::optional<absl::Duration> RetryAfter(const absl::Status& status);

class Scheduler {
 public:
  // Builds a fresh engine session for a resolved spec (plain or memory mode).
  using SessionFactory =
      std::function<absl::StatusOr<std::unique_ptr<engine::Session>>(const SessionSpec&)>;
  // Removes the least recently used idle session from the cache (nullptr: none left).
  using EvictIdle = std::function<std::shared_ptr<LiveSession>()>;

  // `engine` must outlive the scheduler. Starts the thread.
  Scheduler(engine::Engine* engine, SessionFactory factory, EvictIdle evict_idle,
            const KvGeometry& geometry, const SchedulerOptions& options);
  ~Scheduler();  // Stop()

  // Queues a turn. Its tokens and end arrive on job->stream.
  void Submit(std::shared_ptr<TurnJob> job);

  // Hands an engine session to the scheduler thread for destruction.
  void Retire(engine::Session* session);
  // A deleter that calls Retire (for LiveSession::engine_session).
  EngineSessionDeleter Deleter();

  // Finishes every queued and running turn, then joins the thread. Idempotent.
  void Stop();

  const KvGeometry& geometry() const { return geometry_; }
  uint64_t kv_pool_bytes() const { return kv_pool_bytes_; }
  // KV pool bytes in use (blocks held), and reserved (running turns' reservations plus
  // what idle sessions hold), refreshed every iteration.
  uint64_t kv_used_bytes() const { return kv_used_bytes_.load(); }
  uint64_t kv_reserved_bytes() const { return kv_reserved_bytes_.load(); }
  int active_turns() const { return active_count_.load(); }
  int queued_turns() const;
  uint64_t decode_steps() const { return decode_steps_.load(); }
  uint64_t decoded_tokens() const { return decoded_tokens_.load(); }
  uint64_t rejected_turns() const { return rejected_turns_.load(); }
  // Prompts a turn took as a copy of a prompt share's feeder instead of feeding them.
  uint64_t prompt_copies() const { return prompt_copies_.load(); }
  // Tokens picked under a structured turn's mask, and the time the masks took.
  uint64_t structured_tokens() const { return structured_tokens_.load(); }
  double structured_mask_seconds() const { return 1e-9 * structured_mask_ns_.load(); }
  // Turns whose prompt began with a prefix cache entry's tokens, and those tokens.
  uint64_t prefix_cache_hits() const { return prefix_cache_hits_.load(); }
  uint64_t prefix_cache_tokens() const { return prefix_cache_tokens_.load(); }

 private:
  enum class Phase { kStart, kPrefill, kDecode, kFinish };
  struct Running {
    std::shared_ptr<TurnJob> job;
    Phase phase = Phase::kStart;
    int reserved_blocks = 0;
    // A resumed full-mode state's ids, prefilled in chunks before the prompt (the same
    // KV as ImportState, docs/contracts.md "Bitwise rule", without one O(history) call).
    std::vector<int32_t> replay_ids;
    size_t replay_pos = 0;
    size_t prompt_pos = 0;
    double last_ms_per_token = 0;  // this turn's last chunk; 0 = none yet
    // A long prompt (or replay) rest fed in pieces (Session::StartPrefill), while true:
    bool in_pieces = false;
    int64_t pieces_resident = 0;  // entries resident when it started
    size_t pieces_tokens = 0;
    double pieces_ms = 0;         // time its pieces took so far
    int32_t pending_token = -1;       // sampled, emitted, not yet fed
    bool stop_after_feed = false;
    int64_t folded_at_start = 0;
    double fold_seconds_at_start = 0;
    std::optional<engine::Sampler> sampler;
    // A structured turn's hold on its tokens (TurnJob::grammar), the logits it masked
    // last, and why its last pick found no token.
    std::optional<structured::JsonConstraint> constraint;
    std::vector<float> masked_logits;
    absl::Status pick_error;
    bool prefix_checked = false;   // the prefix cache was asked (once, before its prompt)
    std::vector<int32_t> emitted;  // an ephemeral turn's tokens, for the prefix cache
  };
  // A finished ephemeral session in the prefix cache: the ids it fed, oldest first.
  struct PrefixEntry {
    EngineSessionPtr session;
    std::string scope;  // TurnJob::cache_scope of the turn that fed it
    SessionSpec spec;
    std::vector<int32_t> ids;
    uint64_t last_used = 0;
  };

  static double MsSince(TurnJob::Clock::time_point t);
  // Seconds a memory-mode session spent folding so far (0 for the other modes).
  static double FoldSeconds(const engine::Session* session);

  void Loop();
  void DrainGraveyard();
  // Step 2 for one queued turn: running_ gains it, or its stream ends with the reason.
  void Admit(std::shared_ptr<TurnJob> job);
  absl::Status Busy(int need_blocks) const;
  void StartTurn(Running& r);
  // Steps 3 and 4; then the turns whose prompt is done sample their first token.
  void PromptStep();
  // Unbounded mode (prefill_stall 0, or no decode step measured yet): the chunk `r`
  // prefills now, `remaining` tokens left, given whether other turns wait for this step.
  size_t ChunkTokens(const Running& r, size_t remaining, bool contended) const;
  // Bounded mode: whether r's rest (`remaining` tokens) is short enough to run whole now,
  // like a decode token (at most the step's budget or 8 decode steps, by the cost model).
  bool RunsWhole(const Running& r, size_t remaining, double step_budget_ms) const;
  // The rest of r's current prompt segment: the replayed history's ids, then the prompt's
  // (a chunk never crosses from one into the other).
  static std::span<const int32_t> PromptRest(const Running& r);
  // r fed the first `tokens` of PromptRest(r): moves past them (frees a finished replay).
  static void Advance(Running& r, size_t tokens);
  void PrefillChunk(Running& r, size_t take);
  // Whether PromptRest(r) is a prompt the turn scores (TurnJob::prompt_top_logprobs; a
  // replayed history never is).
  static bool ScoresRest(const Running& r);
  // Before r feeds PromptRest(r): the session's prompt observer scores the prompt's
  // tokens when ScoresRest(r), and is off otherwise.
  static void ObservePrompt(Running& r);
  // A long prompt's rest in pieces of bounded work under the credit: starts it, or
  // continues it while credit is left. True once the rest is fed.
  void StartPieces(Running& r, size_t tokens);
  bool ContinuePieces(Running& r);
  // Whether r, a member of a prompt share, waits: for the share's other members to be
  // admitted (while turn slots are left), or for another member to feed the prompt (the
  // first member to ask after that becomes the feeder).
  bool WaitsForShare(const Running& r) const;
  // After the step's prompt work: every waiting member of a share whose feeder's prompt
  // was fed in this step copies it (or, when its prompt or geometry differ, leaves the
  // share to feed its own); then those shares have no feeder until a member asks again.
  void CopySharedPrompts();
  void CopyPrompt(Running& r);
  // Before r's first prompt work: the longest prefix of its prompt a prefix cache entry
  // holds, copied into r's fresh session (its prompt then starts after it).
  void ReusePrefix(Running& r);
  // r finished OK: its ephemeral session joins the prefix cache (replacing an entry whose
  // ids it extends; the least recently used entry goes when the cache is full).
  void KeepPrefix(Running& r);
  // Drops the least recently used entry (its session retires); false when none.
  bool DropPrefixEntry();
  void EndPrompt(Running& r);
  void DecodeStep();
  // r's token from its logits (and its log-probabilities, when the turn asks); -1 when a
  // structured turn's mask leaves no token (r.pick_error says why). Touches only r's
  // sampler and constraint, and atomic counters: rows may pick on different threads at
  // once.
  int32_t PickToken(Running& r, engine::TokenLogprobs* logprobs);
  // Picks r's token, then emits it.
  void SampleAndEmit(Running& r);
  // The tokens (and log-probabilities when asked) of the rows pick_rows_ names, into
  // picked_ / picked_logprobs_.
  void PickTokens();
  // Streams r's picked token; r feeds it next step, or stops after feeding it.
  void Emit(Running& r, int32_t token, const engine::TokenLogprobs& logprobs);
  void Fail(Running& r, absl::Status status);
  void Complete(Running& r);
  void RefreshStats();

  engine::Engine* const engine_;
  const SessionFactory factory_;
  const EvictIdle evict_idle_;
  const KvGeometry geometry_;
  const SchedulerOptions options_;
  const uint64_t kv_pool_bytes_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<TurnJob>> queue_;
  std::vector<engine::Session*> graveyard_;
  bool stop_ = false;

  // Scheduler thread only.
  std::vector<Running> running_;
  std::vector<size_t> prefill_order_;
  std::vector<std::shared_ptr<PromptShare>> shares_fed_;  // prompts fed in this step
  std::vector<PrefixEntry> prefix_cache_;
  uint64_t prefix_clock_ = 0;
  // Blocks counted for each idle engine session (HeldBlocks at the end of its last turn);
  // reserved_blocks_ = these + the reservations of running turns.
  absl::flat_hash_map<const engine::Session*, int> idle_blocks_;
  int64_t reserved_blocks_ = 0;
  double decode_step_ms_ = 0;  // decode step duration, smoothed
  // Prompt time long prompts may still spend: each decode step adds prefill_stall x its
  // time (up to one step's budget), each chunk subtracts its time; long prompts wait
  // while it is not positive.
  double prefill_credit_ms_ = 0;
  PrefillCostModel prefill_cost_;
  std::vector<engine::Session*> batch_sessions_;
  std::vector<int32_t> batch_ids_;
  std::vector<size_t> batch_index_;
  engine::ForwardResult forward_scratch_;
  std::vector<size_t> pick_rows_;  // running_ indices whose token a decode step picks
  std::vector<int32_t> picked_;
  std::vector<engine::TokenLogprobs> picked_logprobs_;

  std::atomic<uint64_t> kv_used_bytes_{0};
  std::atomic<uint64_t> kv_reserved_bytes_{0};
  std::atomic<int> active_count_{0};
  std::atomic<uint64_t> decode_steps_{0};
  std::atomic<uint64_t> decoded_tokens_{0};
  std::atomic<uint64_t> rejected_turns_{0};
  std::atomic<uint64_t> prompt_copies_{0};
  std::atomic<uint64_t> structured_tokens_{0};
  std::atomic<uint64_t> structured_mask_ns_{0};
  std::atomic<uint64_t> prefix_cache_hits_{0};
  std::atomic<uint64_t> prefix_cache_tokens_{0};
  std::thread thread_;
};

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_SCHEDULER_H_
