// ChatTurn: one generating HTTP request in flight. Receives the turn's tokens from the
// TurnPort, detokenizes them, applies the stop strings and answers in OpenAI's format:
// one JSON body, or server-sent events ending in "data: [DONE]" (a response: typed events
// ending in response.completed). A client that goes away
// cancels the turn (nothing is committed).
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
  std::string previous_response_id;  // kResponse
  std::vector<std::string> stop;
  // True for a conversation whose session is thrown away afterwards: a stop string
  // cancels the turn at once. False for a kept session: the turn runs to its end so that
  // what the session holds stays a committed turn (the text after the stop string is
  // generated but not shown).
  bool cancel_on_stop = false;
  // Completions' echo: the prompt text, shown first (outside the stop strings' reach),
  // with its tokens' log-probabilities when the turn scores its prompt.
  std::string echo;
};

class ChatTurn final : public TurnObserver, public std::enable_shared_from_this<ChatTurn> {
 public:
  // The turn's outcome (code, version, timings, token counts) goes into the exchange's
  // request record before the answer completes it.
  ChatTurn(ChatTurnOptions options, std::shared_ptr<ObservedExchange> exchange,
           const Tokenizer* tokenizer);

  // Registers the client-gone callback; call once, before StartTurn.
  void Watch();
  // The running turn (StartTurn's result); cancels it at once if the client already left.
  void Attach(std::shared_ptr<RunningTurn> turn);
  // StartTurn failed: answers the error.
  void Fail(const absl::Status& status, int64_t retry_after_ms = 0);

  void OnTokens(const std::vector<int32_t>& ids,
                const std::vector<TokenLogprobIds>& logprobs) override;
  void OnPromptLogprobs(const std::vector<int32_t>& ids,
                        const std::vector<TokenLogprobIds>& logprobs) override;
  void OnDone(const absl::Status& status, const TurnResult& result,
              int64_t retry_after_ms) override;

 private:
  void StartStreamLocked();
  void EmitLocked(const std::string& text, std::vector<TokenLogprob> logprobs,
                  const std::string& finish_reason);
  void CancelLocked();
  // Token `id` as the answer shows it, with its log-probabilities (null: unscored).
  TokenLogprob Shown(int32_t id, const TokenLogprobIds* logprobs) const;
  // The echo (text and prompt log-probabilities), once, before the first generated text.
  void EmitEchoLocked();
  // The turn's outcome into the exchange's request record.
  void Record(const absl::Status& status, const TurnResult& result);

  const ChatTurnOptions options_;
  const std::shared_ptr<ObservedExchange> exchange_;
  const Tokenizer* const tokenizer_;

  std::mutex mu_;
  IncrementalDecoder decoder_;
  StopMatcher stop_;
  std::shared_ptr<RunningTurn> turn_;
  bool client_gone_ = false;
  bool stream_started_ = false;
  bool answered_ = false;
  bool first_chunk_ = true;
  uint32_t generated_ = 0;
  uint32_t prompt_tokens_ = 0;
  std::string text_;                    // non-streaming or a response: the whole answer
  std::vector<TokenLogprob> logprobs_;  // non-streaming or a response
  int sequence_ = 0;                    // a streamed response's next sequence_number
  bool echoed_ = false;
  std::vector<TokenLogprob> echo_logprobs_;  // the prompt's, until the echo goes out
};

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_CHAT_TURN_H_
