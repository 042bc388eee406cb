// LiveSession: one session resident on this replica (derived state only; the store holds
// the truth), and TurnJob: one turn as the Scheduler runs it.
//
// Threading: the fields under "scheduler-owned" are touched only by the scheduler thread
// (the engine is single-threaded and its KV pool is not thread-safe, so engine sessions are
// created, fed, exported and destroyed there: EngineSessionPtr's deleter hands the pointer
// back to the scheduler). Stats are atomics any thread may read.
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_LIVE_SESSION_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_LIVE_SESSION_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "inference_svc/engine/sampler.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/runtime/sampling.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/token_constraint.h"

namespace kvfold::runtime {

// Destroys engine sessions on the scheduler thread (see the file comment).
struct EngineSessionDeleter {
  std::function<void(engine::Session*)> retire;
  void operator()(engine::Session* s) const {
    if (s == nullptr) return;
    if (retire) {
      retire(s);
    } else {
      delete s;
    }
  }
};
using EngineSessionPtr = std::unique_ptr<engine::Session, EngineSessionDeleter>;

// A session's geometry, resolved (Runtime::ResolveSpec): memory modes take W from the
// projector, full mode has window_size 0, sink_tokens is 0 outside sink mode.
struct SessionSpec {
  core::KvMode mode = core::KvMode::kFull;
  int window_size = 0;
  int sink_tokens = 0;
  bool operator==(const SessionSpec&) const = default;
};

struct LiveSession {
  std::string session_id;
  SessionSpec spec;
  SamplingSpec sampling;  // the session's defaults

  // --- scheduler-owned -------------------------------------------------------------
  EngineSessionPtr engine_session;  // null until the first turn creates/imports it
  std::array<uint64_t, 4> rng_state{};

  // --- stats (written by the scheduler at the end of a turn) -----------------------
  std::atomic<uint64_t> version{0};  // store version the derived state equals; 0 = none
  std::atomic<int64_t> total_tokens{0};
  // The session's last token id (-1: empty or unknown): tells a chat continuation whether
  // the model closed its turn itself (chat_template.h).
  std::atomic<int32_t> last_token{-1};
  std::atomic<int64_t> tokens_folded{0};
  std::atomic<int64_t> resident_tokens{0};
  std::atomic<uint64_t> kv_bytes_resident{0};
};

enum class FinishReason { kNone, kStop, kLength };

// Tokens and the end of a turn, from the scheduler thread to the consumer.
class TurnStream {
 public:
  explicit TurnStream(std::function<void()> on_progress) : on_progress_(std::move(on_progress)) {}
  // `logprobs`: the token's log-probabilities, given for every token of a turn that asked
  // for them (SamplingParams::top_logprobs >= 0) and for none otherwise.
  void PushToken(int32_t token, const engine::TokenLogprobs* logprobs = nullptr);
  void End(absl::Status status);
  // The prompt's log-probabilities (TurnJob::prompt_top_logprobs), set once before the
  // first token or the end; TakePromptLogprobs moves them out (empty before, and after).
  void SetPromptLogprobs(std::vector<engine::TokenLogprobs> logprobs);
  void TakePromptLogprobs(std::vector<engine::TokenLogprobs>* out);
  // Waits up to `timeout` for news; moves new tokens to *out (and, when `logprobs` is not
  // null, their log-probabilities, one per token, to *logprobs). True once the turn ended.
  bool Wait(std::chrono::milliseconds timeout, std::vector<int32_t>* out,
            std::vector<engine::TokenLogprobs>* logprobs = nullptr);
  bool ended() const;
  absl::Status status() const;  // valid once ended

 private:
  void Notify();
  const std::function<void()> on_progress_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> pending_;
  std::vector<engine::TokenLogprobs> pending_logprobs_;  // empty unless requested
  std::vector<engine::TokenLogprobs> prompt_logprobs_;
  bool ended_ = false;
  absl::Status status_;
};

struct TurnJob;

// The turns of one prompt share (runtime.h, TurnRequest::prompt_share): once every member
// was admitted or refused, the first to run feeds the prompt and the others copy its
// session in the step its prompt is fed. Scheduler thread only, but for `members`.
struct PromptShare {
  explicit PromptShare(int members) : members(members) {}
  const int members;                     // turns that will be started with this share
  int settled = 0;                       // of them, admitted or ended before admission
  const TurnJob* feeder = nullptr;       // the member feeding the prompt; null: none yet
  const engine::Session* fed = nullptr;  // the feeder's session, prompt fed, in that step
  const TurnJob* fed_job = nullptr;
  std::vector<engine::TokenLogprobs> prompt_logprobs;  // the feeder's, when it scored
  bool kept = false;  // a member's session went to the prefix cache (one per share)
};

struct TurnJob {
  using Clock = std::chrono::steady_clock;
  explicit TurnJob(std::function<void()> on_progress) : stream(std::move(on_progress)) {}

  // --- inputs, fixed before Submit ---------------------------------------------------
  std::shared_ptr<LiveSession> live;
  // Import this state into a fresh engine session before the prompt (a resume); nullopt
  // with live->engine_session == null creates an empty session.
  std::optional<engine::SessionState> restore_state;
  std::vector<int32_t> prompt_ids;
  engine::SamplingParams sampling;  // resolved; max_new_tokens 0 = prefill only
  std::optional<uint64_t> reseed;   // set: the RNG restarts from this seed
  // -1: the prompt is not scored. 0..kMaxTopLogprobs: each prompt token that follows a
  // token (all of them on a session that holds tokens, all but the first on an empty one)
  // gets its log-probability and this many alternatives, from the logits before it
  // (engine::Session::ObservePrefillRows), streamed before the first token.
  int prompt_top_logprobs = -1;
  int reserve_blocks = 0;           // KV blocks the turn may hold at most (kv_reservation.h)
  // Set: the document the turn's tokens are held to (TurnRequest::response_format), and
  // the vocabulary's bytes.
  std::shared_ptr<const structured::Grammar> grammar;
  std::shared_ptr<const structured::TokenTable> token_table;
  // Set: an ephemeral turn whose prompt may be copied from another member of the share
  // (dropped once its prompt is fed or copied). `choices`: the same share, to the turn's
  // end, so that the members leave one prefix cache entry.
  std::shared_ptr<PromptShare> share;
  std::shared_ptr<PromptShare> choices;
  // The caller's tenant and credential (Runtime::CacheKey of no session): an ephemeral
  // turn reuses only prefix cache entries of the same scope, so no tenant learns what
  // another fed (not even from how fast a prompt starts).
  std::string cache_scope;
  Clock::time_point submitted_at;

  // --- control -----------------------------------------------------------------------
  std::atomic<bool> cancelled{false};
  std::atomic<bool> admitted{false};  // set by the scheduler once the reservation is held
  TurnStream stream;

  // --- scheduler-owned: the prompt's log-probabilities so far, and the prompt tokens
  // fed while observed ---------------------------------------------------------------
  std::vector<engine::TokenLogprobs> prompt_logprobs;
  size_t prompt_rows_seen = 0;

  // --- results, valid once the stream ended OK ---------------------------------------
  engine::SessionState final_state;
  std::array<uint64_t, 4> final_rng_state{};
  FinishReason finish_reason = FinishReason::kNone;
  uint32_t generated_tokens = 0;
  uint32_t cached_prompt_tokens = 0;  // prompt tokens copied from the prefix cache
  int64_t tokens_folded_in_turn = 0;
  double queue_ms = 0, restore_ms = 0, prefill_ms = 0, decode_ms = 0, ttft_ms = 0;
  double fold_ms = 0;  // part of prefill_ms/decode_ms spent folding (memory modes)
};

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_LIVE_SESSION_H_
