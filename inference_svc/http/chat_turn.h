// One generating HTTP request in flight. A ChoiceSet is the request's answer; each of its
// choices is a ChatTurn, one turn of the TurnPort: it receives the turn's tokens,
// detokenizes them and applies the stop strings; the set answers in OpenAI's format: one
// JSON body with every choice once all are done, or server-sent events (each choice's
// chunks under its index) ending in "data: [DONE]" (a response, always one choice: typed
// events ending in response.completed). The first choice that fails answers the error and
// cancels the others; a client that goes away cancels every turn (nothing is committed).
#ifndef KVFOLD_INFERENCE_SVC_HTTP_CHAT_TURN_H_
#define KVFOLD_INFERENCE_SVC_HTTP_CHAT_TURN_H_

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "inference_svc/http/observed_exchange.h"
#include "inference_svc/http/openai_protocol.h"
#include "inference_svc/http/stop_matcher.h"
#include "inference_svc/http/turn_port.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold::http {

struct ChatTurnOptions {
  enum class Api { kChat, kCompletion, kResponse };
  Api api = Api::kChat;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  ChatAnswer head;                   // id, model, created; usage.session_id for kept sessions
  std::string response_echo;         // kResponse: ResponsesRequest::echo
  std::vector<std::string> stop;
  // The request's stop ids: the token that ends the turn is not shown (its text, its
  // log-probabilities), as vLLM leaves it out.
  std::vector<int32_t> stop_token_ids;
  // True for a conversation whose session is thrown away afterwards: a stop string
  // cancels the turn at once. False for a kept session: the turn runs to its end so that
  // what the session holds stays a committed turn (the text after the stop string is
  // generated but not shown).
  bool cancel_on_stop = false;
  // Choices per prompt (n): usage counts each prompt's tokens once.
  int choices_per_prompt = 1;
  // Chat with tool_choice other than none: each choice's text is read as tool calls
  // (ReadToolAnswer). A stream holds back what may be a call (all of it for required or
  // a named function; for auto from the first <tool_call> on, or in the JSON style an
  // answer that opens with '{' or a tag) until the turn ends.
  std::shared_ptr<const ToolSet> tools;
  // Sent with the answer, streamed or not (X-Kvfold-Schema-Skipped).
  HttpHeaders headers;
  // kResponse: keep the answer with the version the turn writes (CommitRecord gives
  // StoredResponseJson, with these input items: ResponsesRequest::input_items).
  bool keep_record = false;
  std::string input_items;
};

class ChatTurn;

class ChoiceSet final : public std::enable_shared_from_this<ChoiceSet> {
 public:
  // `count` choices, ChatTurns made by Choice(0) .. Choice(count - 1). Their outcomes
  // (codes, token counts; the first choice's version and timings) go into the exchange's
  // request record before the answer completes it.
  ChoiceSet(ChatTurnOptions options, int count, std::shared_ptr<ObservedExchange> exchange,
            const Tokenizer* tokenizer);

  // Registers the client-gone callback; call once, before the first StartTurn.
  void Watch();
  // Choice `index`'s turn observer. `echo` (completions): the prompt text, shown first
  // (outside the stop strings' reach), with its tokens' log-probabilities when the turn
  // scores its prompt.
  std::shared_ptr<ChatTurn> Choice(int index, std::string echo = "");
  // True once the answer is settled early: a choice failed or the client went away.
  // Choices not started yet should not be.
  bool closed();

  const ChatTurnOptions& options() const { return options_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }

 private:
  friend class ChatTurn;
  // Writes a streamed event (started at the first one) unless the answer is settled;
  // `event` gets the response stream's sequence number to advance.
  void Stream(const std::function<std::string(int* sequence)>& event);
  // Choice `choice.index` is done (its text, logprobs and usage in `choice`); the answer
  // goes out when it is the last.
  void Finish(ChatAnswer choice);
  // A choice failed: the first answers `status` and cancels the other choices.
  void Fail(int index, const absl::Status& status, int64_t retry_after_ms);
  // A choice's outcome into the request record.
  void Record(int index, const absl::Status& status, const TurnResult& result,
              uint32_t prompt_tokens, uint32_t generated);
  void StartStreamLocked();
  // Cancels every choice but `except` (-1: all); call without mu_.
  void CancelChoices(int except);

  const ChatTurnOptions options_;
  const int count_;
  const std::shared_ptr<ObservedExchange> exchange_;
  const Tokenizer* const tokenizer_;

  std::mutex mu_;
  std::vector<std::weak_ptr<ChatTurn>> turns_;
  bool closed_ = false;  // failed or client gone: nothing more is written
  bool stream_started_ = false;
  int sequence_ = 0;  // a streamed response's next sequence_number
  std::vector<ChatAnswer> done_;
  uint32_t record_prompt_tokens_ = 0, record_generated_ = 0, record_folded_ = 0;
};

class ChatTurn final : public TurnObserver {
 public:
  ChatTurn(std::shared_ptr<ChoiceSet> set, int index, std::string echo);

  // The running turn (StartTurn's result); cancels it at once if the answer is settled.
  void Attach(std::shared_ptr<RunningTurn> turn);
  // StartTurn failed: answers the error (and cancels the other choices).
  void Fail(const absl::Status& status, int64_t retry_after_ms = 0);
  // Abandons the turn (nothing is committed).
  void Cancel();

  void OnTokens(const std::vector<int32_t>& ids,
                const std::vector<TokenLogprobIds>& logprobs) override;
  void OnPromptLogprobs(const std::vector<int32_t>& ids,
                        const std::vector<TokenLogprobIds>& logprobs) override;
  void OnDone(const absl::Status& status, const TurnResult& result,
              int64_t retry_after_ms) override;
  // With options.keep_record: completes the answer (CompleteLocked) and returns its record.
  std::optional<std::string> CommitRecord() override;

 private:
  // The end of the answer, once: the decoder's and the stop matcher's tails shown, a tool
  // answer read; into completed_ with the finish reason this front sets ("stop" for a stop
  // string, the calls' reason; else empty: the turn's). Runs at CommitRecord (so that the
  // record is the answer sent) or at OnDone.
  void CompleteLocked();
  void EmitLocked(const std::string& text, std::vector<TokenLogprob> logprobs,
                  const std::string& finish_reason);
  // Visible text of the answer: EmitLocked, or held back where it may be a tool call.
  void EmitContentLocked(const std::string& text, std::vector<TokenLogprob> logprobs);
  // The end of a streamed tool answer: what was held back goes out as content, or its
  // calls do (a chat delta; a response's closing events, from answer->tool_calls) and
  // answer->finish_reason becomes "tool_calls".
  void FinishToolStreamLocked(ChatAnswer* answer);
  void CancelLocked();
  // Token `id` as the answer shows it, with its log-probabilities (null: unscored).
  TokenLogprob Shown(int32_t id, const TokenLogprobIds* logprobs) const;
  // The echo (text and prompt log-probabilities), once, before the first generated text.
  void EmitEchoLocked();

  const std::shared_ptr<ChoiceSet> set_;
  const ChatTurnOptions& options_;  // the set's
  const int index_;
  const std::string echo_;
  const Tokenizer* const tokenizer_;

  std::mutex mu_;
  IncrementalDecoder decoder_;
  StopMatcher stop_;
  std::shared_ptr<RunningTurn> turn_;
  bool answered_ = false;
  bool first_chunk_ = true;
  uint32_t generated_ = 0;
  uint32_t prompt_tokens_ = 0;
  std::string text_;                    // non-streaming or a response: the whole answer
  std::vector<TokenLogprob> logprobs_;  // non-streaming or a response
  bool echoed_ = false;
  std::vector<TokenLogprob> echo_logprobs_;  // the prompt's, until the echo goes out
  // A streamed tool answer: all its text; what is not shown yet (pending_: may start the
  // call tag; held_: from the tag on) and those tokens' log-probabilities.
  std::string tool_text_;
  std::string pending_;
  std::string held_;
  bool holding_ = false;
  bool decided_ = false;  // JSON style: whether the answer opened as a call is known
  std::vector<TokenLogprob> unsent_logprobs_;
  std::optional<ChatAnswer> completed_;  // CompleteLocked's answer, until OnDone
};

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_CHAT_TURN_H_
