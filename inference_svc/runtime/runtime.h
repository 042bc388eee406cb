// Runtime: everything between the engine and a protocol front (gRPC today, HTTP next): the
// scheduler, live sessions, admission, the session cache and checkpoint/restore through a
// SessionStore. It speaks engine types only; a front translates its protocol to these
// calls and back. Behaviour: docs/service.md; codes: docs/api.md.
//
// A turn:
//   auto turn = runtime.StartTurn(caller, request);   // errors here: nothing ran
//   std::vector<int32_t> tokens;
//   while (!turn->Wait(absl::Milliseconds(20), &tokens)) { stream tokens; tokens.clear(); }
//   absl::StatusOr<TurnUsage> usage = turn->Finish();  // checkpoint with compare-and-set
// A front that does not want to block passes TurnRequest::on_progress and calls Wait with
// a zero timeout when notified. Cancel() (or destroying the handle) stops the turn; a
// cancelled turn is never committed.
//
// Status codes (all absl::Status, never a crash):
//   INVALID_ARGUMENT     bad sampling values, prompt ids outside the vocabulary, both or
//                        over-long prompts, impossible geometry
//   NOT_FOUND            unknown session (or another tenant's)
//   ALREADY_EXISTS       CreateSession on an existing id
//   ABORTED              the session has a turn in progress on this replica (before any
//                        token), or another writer advanced it (at Finish: not committed)
//   FAILED_PRECONDITION  memory mode without a projector, text without a tokenizer, a
//                        block made for another model or projector
//   RESOURCE_EXHAUSTED   the turn's KV reservation does not fit now (RetryAfter() gives
//                        the hint) or can never fit this replica's pool (no hint)
//   CANCELLED            Cancel()
//   UNAVAILABLE          the store cannot be reached
//   DATA_LOSS            a corrupt stored block
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_RUNTIME_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_RUNTIME_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/runtime/live_session.h"
#include "inference_svc/runtime/sampling.h"
#include "inference_svc/runtime/scheduler.h"
#include "inference_svc/runtime/session_store.h"
#include "inference_svc/runtime/session_table.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/token_constraint.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold::runtime {

// Bytes of text per token of the prompt limit when a prompt's size is checked before it is
// tokenized: English averages about 4 bytes a token; 16 leaves room for code and runs of
// whitespace.
inline constexpr size_t kMaxBytesPerPromptToken = 16;

struct RuntimeOptions {
  // Mode of sessions created without one. Default: memory (full without a projector).
  core::KvMode default_mode = core::KvMode::kMemory;
  // Window of sliding/sink sessions created without one; 0 = 1024.
  int default_window = 0;
  // Sink tokens of sink sessions created without a count. Default: 4.
  int default_sink = 4;
  // max_new_tokens when neither the turn nor the session sets it. Default: 128.
  int default_max_new_tokens = 128;
  // Largest max_new_tokens accepted. Default: 4096.
  int max_new_tokens_cap = 4096;
  // Longest prompt accepted, in tokens; a prompt text (or a turn's messages together) of
  // more than kMaxBytesPerPromptToken bytes per token of it is refused before it is
  // tokenized. Default: 65536.
  int max_prompt_tokens = 65536;
  // Budget of idle sessions' KV kept for reuse. Default: 512 MiB.
  size_t session_cache_bytes = size_t{512} << 20;
  SchedulerOptions scheduler;
};

// A new session's geometry as requested; unset / 0 fields take the defaults.
struct SessionRequest {
  std::optional<core::KvMode> mode;
  int window_size = 0;
  int sink_tokens = 0;
};

// What a turn's answer must be (docs/structured-output.md).
struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema, kChoice };
  Kind kind = Kind::kText;
  std::string json_schema;           // kJsonSchema: the schema, as JSON text
  std::vector<std::string> choices;  // kChoice: the answer is exactly one of these texts
  // kJsonSchema: keywords outside the supported subset are read past (and named in
  // TurnUsage::schema_skipped) instead of refusing the turn (Grammar::FromSchema).
  bool lenient = false;
  // kJsonSchema: json_schema already compiled (with `lenient`) by the caller; used as is.
  std::shared_ptr<const structured::Grammar> grammar;
};

struct TurnRequest {
  // The session to continue. Empty: an ephemeral session (geometry `ephemeral`) that
  // starts empty and is neither read from nor written to the store.
  std::string session_id;
  SessionRequest ephemeral;
  // The prompt: token ids, or text for the replica's tokenizer (BOS first when the
  // session is empty). Not both. Empty on an empty session: BOS alone.
  std::vector<int32_t> prompt_ids;
  std::string prompt_text;
  // Or chat messages, rendered with the replica's chat template: the whole conversation
  // on an empty session, only the new messages on one that holds tokens (a continuation,
  // chat_template.h). The template's end-of-turn ids are added to the stop ids.
  std::vector<ChatMessage> messages;
  // With messages: the last (assistant) message is continued, not answered.
  bool continue_final_message = false;
  // With messages: functions the model may call, each as the chat template shows it
  // (ChatRenderOptions::tools; rendered where a conversation starts).
  std::vector<std::string> tools;
  // Overrides of the session's sampling; a non-zero seed restarts the RNG.
  SamplingSpec sampling;
  // -1: no log-probabilities. 0..engine::kMaxTopLogprobs: every generated token comes with
  // its log-probability under the model's raw distribution and this many most likely
  // alternatives (TurnHandle::Wait). INVALID_ARGUMENT outside [-1, kMaxTopLogprobs].
  int top_logprobs = -1;
  // -1: the prompt is not scored. 0..engine::kMaxTopLogprobs: the prompt's tokens get their
  // log-probabilities under the raw distribution, each from the logits before it, with
  // this many alternatives (TurnHandle::TakePromptLogprobs): every prompt token on a
  // session that holds tokens, all but the first on an empty one. The prompt's forwards
  // then compute every row's logits. INVALID_ARGUMENT outside [-1, kMaxTopLogprobs].
  int prompt_logprobs = -1;
  // Feed (and score) the prompt, generate nothing: the turn ends with kLength after its
  // prompt, committed like any other turn.
  bool prompt_only = false;
  // Free text (kText), or a JSON document (or one of the texts of kChoice) the turn's
  // tokens are held to: a token whose bytes cannot continue the document is never picked,
  // stop and EOS ids only once the document is whole, and the turn ends (kStop) once it
  // is whole and nothing may follow it (min_tokens does not hold it longer).
  // Log-probabilities stay those of the raw distribution. INVALID_ARGUMENT for a schema
  // outside the supported subset (the message names the keyword and where it is), bad
  // choices or prompt_only; FAILED_PRECONDITION on a replica without a tokenizer.
  ResponseFormat response_format;
  // Optional: called on a runtime thread whenever tokens or the end are available. Must
  // return quickly and must not call back into the runtime.
  std::function<void()> on_progress;
  // Ephemeral turns only (ignored with a session_id): the turns given the same share (one
  // per prompt, NewPromptShare) feed it once. They wait until all `members` of the share
  // were admitted or refused (or no turn slot is left); then the first of them feeds the
  // prompt and the others copy its session, KV blocks and all, in the step the prompt is
  // fed (engine::Session::CopyFrom: the same state as feeding it, bit for bit). A member
  // whose prompt, geometry or prompt_logprobs differ from the feeder's feeds its own, as
  // does one admitted after the copies (for the members after it). The caller starts all
  // `members` turns, or cancels the ones it started: they wait for the others.
  std::shared_ptr<PromptShare> prompt_share;
};

// A share for `members` (>= 1) turns of one prompt.
inline std::shared_ptr<PromptShare> NewPromptShare(int members) {
  return std::make_shared<PromptShare>(std::max(1, members));
}

struct TurnUsage {
  uint32_t prompt_tokens = 0;
  uint32_t cached_prompt_tokens = 0;  // of them, copied from the prefix cache (not fed)
  uint32_t generated_tokens = 0;
  int64_t tokens_folded = 0;     // in this turn
  uint64_t version = 0;          // committed store version; 0 for an ephemeral session
  uint64_t kv_bytes_resident = 0;
  bool restored_from_store = false;
  FinishReason finish_reason = FinishReason::kNone;
  double queue_ms = 0, restore_ms = 0, prefill_ms = 0, decode_ms = 0, fold_ms = 0;
  double checkpoint_ms = 0, ttft_ms = 0, total_ms = 0;
  // A lenient response_format: the schema's keywords read past, each with where it is.
  std::vector<std::string> schema_skipped;
};

class Runtime;

// One running turn. Not thread-safe (one consumer); the runtime's threads only produce.
class TurnHandle {
 public:
  ~TurnHandle();  // cancels an unfinished turn and waits for it to stop
  TurnHandle(const TurnHandle&) = delete;
  TurnHandle& operator=(const TurnHandle&) = delete;

  // Waits up to `timeout` for tokens and appends the new ones to *tokens (and, for a turn
  // started with top_logprobs >= 0, their log-probabilities, one per token, to *logprobs).
  // Returns true once the turn has ended (no more tokens; call Finish).
  bool Wait(absl::Duration timeout, std::vector<int32_t>* tokens,
            std::vector<engine::TokenLogprobs>* logprobs = nullptr);
  // The prompt's log-probabilities (TurnRequest::prompt_logprobs), in prompt order, aligned
  // to the prompt's end; moved out by the first call after Wait returned a token or the
  // end, empty otherwise.
  void TakePromptLogprobs(std::vector<engine::TokenLogprobs>* out);
  // Stops the turn; Finish() then returns CANCELLED. Safe to call more than once.
  void Cancel();
  // Waits for the end, commits the new state (compare-and-set on the head the turn started
  // from) and returns the usage, or the turn's error. Call once. `record`: the front's own
  // record of the turn and the replica's name, kept with the version (TurnRecord; the
  // runtime fills in the counts and the finish reason); nullopt keeps none.
  absl::StatusOr<TurnUsage> Finish(std::optional<TurnRecord> record = std::nullopt);

  // The prompt as fed (after tokenization / the BOS default).
  const std::vector<int32_t>& prompt_ids() const { return job_->prompt_ids; }
  // True when the turn starts a text: the session was empty and the prompt is BOS alone.
  bool starts_text() const { return starts_text_; }

 private:
  friend class Runtime;
  TurnHandle() = default;
  void Settle();  // after the end: cache bookkeeping, claim released

  Runtime* runtime_ = nullptr;
  Caller caller_;
  std::string session_id_;
  std::string key_;           // empty for an ephemeral session
  uint64_t head_ = 0;         // expected head at commit (0 = create)
  bool restored_ = false;
  bool starts_text_ = false;
  bool finished_ = false;
  double fetch_ms_ = 0;
  TurnJob::Clock::time_point call_start_;
  std::shared_ptr<LiveSession> live_;
  std::shared_ptr<TurnJob> job_;
};

class Runtime {
 public:
  // All must outlive the runtime; tokenizer, chat_template and projector may be null (no
  // text prompts / no chat messages / no memory modes).
  struct Deps {
    engine::Engine* engine = nullptr;
    const Tokenizer* tokenizer = nullptr;
    // Renders TurnRequest::messages; null = no chat form.
    const ChatTemplate* chat_template = nullptr;
    const memory::Projector* projector = nullptr;
    SessionStore* store = nullptr;
  };

  // Starts the scheduler thread.
  Runtime(const Deps& deps, const RuntimeOptions& options);
  ~Runtime();  // Stop()

  // Lets queued and running turns finish, then stops the scheduler. Idempotent.
  void Stop();

  // Defaults applied; FAILED_PRECONDITION for a memory mode without a projector;
  // INVALID_ARGUMENT for a window that differs from the projector's or is too large.
  absl::StatusOr<SessionSpec> ResolveSpec(const SessionRequest& request) const;

  // Creates `session_id` at version 1 (its state after `system_prompt`, prefilled; "" =
  // empty). Returns the version.
  absl::StatusOr<uint64_t> CreateSession(const Caller& caller, const std::string& session_id,
                                         const SessionRequest& request,
                                         const SamplingSpec& defaults,
                                         const std::string& system_prompt);

  // Validates, reads the head, takes the cached copy or loads the head checkpoint, and
  // queues the turn. Errors returned here mean nothing ran and nothing was streamed;
  // admission's verdict (RESOURCE_EXHAUSTED) arrives at Finish, also before any token.
  absl::StatusOr<std::unique_ptr<TurnHandle>> StartTurn(const Caller& caller,
                                                        TurnRequest request);

  // Drops the cached copy of a session (after a delete or a rollback).
  void Forget(const Caller& caller, const std::string& session_id);

  const Scheduler& scheduler() const { return *scheduler_; }
  const SessionTable& sessions() const { return table_; }

 private:
  friend class TurnHandle;
  // (tenant, digest of the store credential, session id): see session_store.h.
  static std::string CacheKey(const Caller& caller, const std::string& session_id);
  absl::StatusOr<std::vector<int32_t>> PromptIds(const TurnRequest& request, bool session_empty,
                                                 int32_t last_token) const;
  // A LiveSession for a stored checkpoint; `restore` receives the state to import.
  std::shared_ptr<LiveSession> LiveFromCheckpoint(const std::string& session_id,
                                                  Checkpoint checkpoint,
                                                  std::optional<engine::SessionState>* restore) const;
  std::shared_ptr<LiveSession> NewLive(const std::string& session_id, const SessionSpec& spec,
                                       const SamplingSpec& defaults) const;
  // Builds the job and queues it; the handle owns the claim on `key` (if any).
  std::unique_ptr<TurnHandle> Launch(
      const Caller& caller, const std::string& session_id, const std::string& key, uint64_t head,
      std::shared_ptr<LiveSession> live, std::optional<engine::SessionState> restore,
      std::vector<int32_t> prompt, const engine::SamplingParams& sampling,
      std::optional<uint64_t> reseed, std::function<void()> on_progress,
      int prompt_top_logprobs = -1, std::shared_ptr<PromptShare> share = nullptr,
      std::shared_ptr<const structured::Grammar> grammar = nullptr);

  const Deps deps_;
  // The tokenizer's bytes for structured output; null without a tokenizer.
  std::shared_ptr<const structured::TokenTable> token_table_;
  const RuntimeOptions options_;
  KvGeometry geometry_;
  // Declared before the table: cached sessions are destroyed first, while the scheduler
  // they retire to still exists.
  std::unique_ptr<Scheduler> scheduler_;
  SessionTable table_;
};

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_RUNTIME_H_
