// TurnPort: everything the HTTP front needs from the replica it runs in — authenticate a
// caller, describe the model, create and fork sessions, run a turn and stream its tokens.
// The front speaks only this interface; the replica implements it on its runtime
// (service/http_turn_port.h), so the front never sees gRPC.
#ifndef KVFOLD_INFERENCE_SVC_HTTP_TURN_PORT_H_
#define KVFOLD_INFERENCE_SVC_HTTP_TURN_PORT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/tokenizer/chat_template.h"

namespace kvfold::http {

// Who calls: the bearer token as sent (empty when none), resolved by the port.
struct Caller {
  std::string tenant;
  std::string token;
};

struct ModelCard {
  std::string id;       // the served model's name
  int64_t created = 0;  // unix seconds the replica started
  uint32_t max_prompt_tokens = 0;  // the longest prompt a turn accepts (0: not stated)
};

// Turns of one prompt (the choices of a request) that the port may feed once and copy to
// the others: made by TurnPort::GroupPrompt, given to each of those turns in
// TurnSpec::prompt_group. Opaque to the front.
class PromptGroup {
 public:
  virtual ~PromptGroup() = default;
};

// What a turn's answer must be: free text, a JSON object, or a document of a JSON Schema
// (docs/structured-output.md).
enum class OutputFormat { kText, kJsonObject, kJsonSchema, kChoice };

struct TurnSpec {
  // Empty: an ephemeral conversation, neither read from nor written to the store.
  std::string session_id;
  // The prompt: token ids, or chat messages the replica renders with its chat template
  // (the whole conversation on an empty session, a continuation on one that holds tokens;
  // the template's end-of-turn ids then stop the turn).
  std::vector<int32_t> prompt_ids;
  std::vector<ChatMessage> messages;
  bool continue_final_message = false;  // messages: continue the last (assistant) one
  // messages: functions the model may call, each as the template shows it
  // (ChatRenderOptions::tools).
  std::vector<std::string> tools;
  // Sampling: temperature 0 = greedy; top_p 0 or 1 = off; seed 0 = the session's RNG
  // continues; max_new_tokens 0 = the server default.
  float temperature = 1;
  float top_p = 0;
  int top_k = 0;  // 0 = off
  uint64_t seed = 0;
  int max_new_tokens = 0;
  // 0 = off (repetition_penalty: 0 and 1 alike).
  float presence_penalty = 0;
  float frequency_penalty = 0;
  float repetition_penalty = 0;
  float min_p = 0;                                    // 0 = off
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias)
  std::vector<int32_t> stop_token_ids;  // end the turn after emitting one of these
  bool ignore_eos = false;              // the model's EOS ids do not end the turn
  int min_tokens = 0;                   // no stop or EOS id among the first min_tokens
  // -1 = no log-probabilities; else also the top_logprobs most likely alternatives.
  int top_logprobs = -1;
  // -1 = the prompt is not scored; else each prompt token that follows a token gets its
  // log-probability and this many alternatives (TurnObserver::OnPromptLogprobs).
  int prompt_logprobs = -1;
  bool prompt_only = false;  // feed (and score) the prompt, generate nothing
  OutputFormat format = OutputFormat::kText;
  std::string json_schema;           // kJsonSchema: the schema, as JSON text
  bool lenient_schema = false;       // kJsonSchema: read past what cannot be held
  // kJsonSchema: the schema compiled by the front (a lenient one, shared by a request's
  // choices); null: the replica compiles json_schema.
  std::shared_ptr<const structured::Grammar> grammar;
  std::vector<std::string> choices;  // kChoice: the answer is exactly one of these texts
  // Ephemeral turns only: turns with the same group and prompt may share its feeding.
  std::shared_ptr<PromptGroup> prompt_group;
};

// One generated token's log-probabilities under the model's raw distribution
// (log_softmax of the logits, before temperature and top_p).
struct TokenLogprobIds {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

struct TurnResult {
  std::string finish_reason;  // "stop" or "length"
  uint32_t prompt_tokens = 0;
  uint32_t cached_prompt_tokens = 0;  // of them, taken from the replica's prefix cache
  uint32_t generated_tokens = 0;
  uint32_t tokens_folded = 0;
  uint64_t version = 0;  // the store version written
  std::string replica;
  bool restored_from_store = false;
  // For the request log: "ttft", "queue", "restore", "prefill", "decode", "fold",
  // "checkpoint", "total" (the runtime's phases of the turn).
  std::vector<std::pair<std::string, double>> timings_ms;
};

// Receives a turn's output. Calls come one at a time, from a thread of the port's; they
// must not block. OnDone comes last, exactly once.
class TurnObserver {
 public:
  virtual ~TurnObserver() = default;
  // `logprobs`: one per id for a turn started with top_logprobs >= 0, else empty.
  virtual void OnTokens(const std::vector<int32_t>& ids,
                        const std::vector<TokenLogprobIds>& logprobs) = 0;
  // A turn started with prompt_logprobs >= 0, once, before its first OnTokens (or its
  // OnDone): the prompt's ids as fed and the log-probabilities of its scored tokens,
  // aligned to the end of `ids` (an empty session's first token has none).
  virtual void OnPromptLogprobs(const std::vector<int32_t>& ids,
                                const std::vector<TokenLogprobIds>& logprobs) = 0;
  // ok: the turn is committed (result valid). Otherwise the status as the port's API
  // defines it; `retry_after_ms` > 0 with ResourceExhausted (admission).
  virtual void OnDone(const absl::Status& status, const TurnResult& result,
                      int64_t retry_after_ms) = 0;
  // A turn of a stored session, once, after its last OnTokens and before it commits: the
  // observer's record of the answer, kept with the version the turn writes
  // (TurnPort::StoredTurnOf reads it back); nullopt keeps none. The default keeps none.
  virtual std::optional<std::string> CommitRecord() { return std::nullopt; }
};

// A stored version's record of the turn that wrote it (TurnObserver::CommitRecord's text
// and the port's counts of that turn).
struct StoredTurn {
  std::string front_record;
  uint32_t prompt_tokens = 0;
  uint32_t cached_prompt_tokens = 0;
  uint32_t generated_tokens = 0;
  uint32_t tokens_folded = 0;
  std::string finish_reason;  // "stop" or "length"
  std::string replica;
};

// Where a stored version's tokens end: what a chat continuation of that version renders
// against (ChatRenderOptions::continuation and previous_turn_closed).
struct SessionTail {
  uint64_t total_tokens = 0;
  int32_t last_token = -1;  // -1: the version holds no token in its window
};

class RunningTurn {
 public:
  virtual ~RunningTurn() = default;
  // Abandon the turn: nothing is committed; OnDone follows with Cancelled.
  virtual void Cancel() = 0;
  // Tokens of the prompt as fed (after rendering and tokenization).
  virtual uint32_t prompt_tokens() const = 0;
};

// The stored-session operations of TurnPort::SessionCall.
enum class SessionOp { kCreate, kGet, kList, kDelete, kFork, kRollback };

class TurnPort {
 public:
  virtual ~TurnPort() = default;

  // `authorization` is the request's Authorization header ("Bearer <token>", or empty).
  // Unauthenticated when the replica requires a token and this one is missing/unknown.
  virtual absl::StatusOr<Caller> Authenticate(std::string_view authorization) = 0;
  virtual ModelCard Model() = 0;
  // OK when the replica is ready for traffic (its store answers, its KV pool is backed);
  // else Unavailable naming what it waits for.
  virtual absl::Status Ready() = 0;

  // The calls below may block on the store: call them from a worker thread.
  // A new empty session with the server's defaults. AlreadyExists.
  virtual absl::Status CreateSession(const Caller& caller, const std::string& session_id) = 0;
  // The session's head version. NotFound.
  virtual absl::StatusOr<uint64_t> HeadVersion(const Caller& caller,
                                               const std::string& session_id) = 0;
  // A new session `new_id` from version `version` of `source`. NotFound.
  virtual absl::Status ForkSession(const Caller& caller, const std::string& source,
                                   uint64_t version, const std::string& new_id) = 0;
  // The record kept with version `version` of the caller's session `session_id`. NotFound
  // for a session or version the caller does not have, or a version written without one.
  virtual absl::StatusOr<StoredTurn> StoredTurnOf(const Caller& caller,
                                                  const std::string& session_id,
                                                  uint64_t version) = 0;
  // Where version `version` of the caller's session `session_id` ends. NotFound for a
  // session or version the caller does not have.
  virtual absl::StatusOr<SessionTail> TailOf(const Caller& caller, const std::string& session_id,
                                             uint64_t version) = 0;
  // kvfold's stored-session operations in the gRPC API's messages, in protobuf's JSON
  // mapping with the .proto's field names (docs/api.md): `request_json` is the operation's
  // request (CreateSessionRequest, ListSessionsRequest, ForkSessionRequest,
  // RollbackSessionRequest; empty = all defaults; Get and Delete take none), and
  // `session_id` (Get, Delete, Fork's source, Rollback) stands for the request's id field,
  // which the JSON must then leave out or repeat. The answer is the response message
  // (Session, ListSessionsResponse, DeleteSessionResponse). InvalidArgument for JSON that
  // is not the request message (unknown fields included); NotFound for a session the caller
  // does not have.
  virtual absl::StatusOr<std::string> SessionCall(const Caller& caller, SessionOp op,
                                                  const std::string& session_id,
                                                  const std::string& request_json) = 0;
  // A group for the `turns` ephemeral turns of one prompt, all of which the front then
  // starts (or cancels, the ones started, when one cannot start); null when the port
  // feeds every turn's prompt itself.
  virtual std::shared_ptr<PromptGroup> GroupPrompt(int turns) { return nullptr; }
  // Starts a turn; its output goes to `observer` (which the port keeps until OnDone).
  // Errors found before the turn starts may come either as the return value or via OnDone.
  virtual absl::StatusOr<std::shared_ptr<RunningTurn>> StartTurn(
      const Caller& caller, const TurnSpec& spec, std::shared_ptr<TurnObserver> observer) = 0;
};

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_TURN_PORT_H_
