// ChatTurn (chat_turn.h).
#include "inference_svc/http/chat_turn.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace kvfold::http {

ChatTurn::ChatTurn(ChatTurnOptions options, std::shared_ptr<ObservedExchange> exchange,
                   const Tokenizer* tokenizer)
    : options_(std::move(options)),
      exchange_(std::move(exchange)),
      tokenizer_(tokenizer),
      decoder_(tokenizer, /*at_text_start=*/false),
      stop_(options_.stop) {}

void ChatTurn::Watch() {
  std::weak_ptr<ChatTurn> weak = weak_from_this();
  exchange_->OnClientGone([weak] {
    if (auto self = weak.lock()) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->client_gone_ = true;
      self->CancelLocked();
    }
  });
}

void ChatTurn::Attach(std::shared_ptr<RunningTurn> turn) {
  const uint32_t prompt_tokens = turn->prompt_tokens();  // before mu_: the port locks too
  std::lock_guard<std::mutex> lock(mu_);
  turn_ = std::move(turn);
  prompt_tokens_ = prompt_tokens;
  if (client_gone_ || (stop_.stopped() && options_.cancel_on_stop)) CancelLocked();
}

void ChatTurn::CancelLocked() {
  if (turn_ != nullptr) turn_->Cancel();
}

void ChatTurn::Fail(const absl::Status& status, int64_t retry_after_ms) {
  OnDone(status, TurnResult{}, retry_after_ms);
}

void ChatTurn::StartStreamLocked() {
  if (stream_started_) return;
  stream_started_ = true;
  exchange_->StartStream(200, "text/event-stream");
  if (options_.api == ChatTurnOptions::Api::kResponse) {
    exchange_->Write(ResponseStreamStart(options_.head, options_.previous_response_id, &sequence_));
  }
}

void ChatTurn::EmitLocked(const std::string& text, std::vector<TokenLogprob> logprobs,
                          const std::string& finish_reason) {
  if (!options_.stream) {
    text_ += text;
    for (TokenLogprob& t : logprobs) logprobs_.push_back(std::move(t));
    return;
  }
  if (options_.api == ChatTurnOptions::Api::kResponse) {
    // A streamed response's closing events repeat the whole text.
    text_ += text;
    logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
  }
  if (text.empty() && logprobs.empty() && finish_reason.empty()) return;
  StartStreamLocked();
  switch (options_.api) {
    case ChatTurnOptions::Api::kChat:
      exchange_->Write(ChatChunkEvent(options_.head, text, first_chunk_, finish_reason, logprobs));
      break;
    case ChatTurnOptions::Api::kCompletion:
      exchange_->Write(CompletionChunkEvent(options_.head, text, finish_reason, logprobs));
      break;
    case ChatTurnOptions::Api::kResponse:
      // The finish reason goes into the closing events (ResponseStreamEnd).
      if (!text.empty() || !logprobs.empty()) {
        exchange_->Write(ResponseTextDeltaEvent(options_.head, text, logprobs, &sequence_));
      }
      break;
  }
  first_chunk_ = false;
}

void ChatTurn::OnTokens(const std::vector<int32_t>& ids,
                        const std::vector<TokenLogprobIds>& logprobs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (answered_ || stop_.stopped()) return;
  EmitEchoLocked();
  std::string text;
  std::vector<TokenLogprob> shown;
  for (size_t i = 0; i < ids.size(); ++i) {
    ++generated_;
    text += decoder_.Push(ids[i]);
    if (options_.logprobs && i < logprobs.size()) shown.push_back(Shown(ids[i], &logprobs[i]));
  }
  std::string visible = stop_.Push(text);
  if (stop_.stopped()) {
    shown.clear();  // the tokens of a stop string are not shown
    if (options_.cancel_on_stop) CancelLocked();
  }
  EmitLocked(visible, std::move(shown), "");
}

void ChatTurn::OnPromptLogprobs(const std::vector<int32_t>& ids,
                                const std::vector<TokenLogprobIds>& logprobs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.logprobs || echoed_) return;
  const size_t first = ids.size() - std::min(ids.size(), logprobs.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    echo_logprobs_.push_back(Shown(ids[i], i >= first ? &logprobs[i - first] : nullptr));
  }
}

TokenLogprob ChatTurn::Shown(int32_t id, const TokenLogprobIds* logprobs) const {
  TokenLogprob t;
  t.token = std::string(tokenizer_->TokenBytes(id));
  t.scored = logprobs != nullptr;
  if (!t.scored) return t;
  t.logprob = logprobs->logprob;
  for (const auto& [alternative, lp] : logprobs->top) {
    t.top.emplace_back(std::string(tokenizer_->TokenBytes(alternative)), lp);
  }
  return t;
}

void ChatTurn::EmitEchoLocked() {
  if (echoed_) return;
  echoed_ = true;
  if (options_.echo.empty() && echo_logprobs_.empty()) return;
  EmitLocked(options_.echo, std::move(echo_logprobs_), "");
}

void ChatTurn::OnDone(const absl::Status& status, const TurnResult& result,
                      int64_t retry_after_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if (answered_) return;
  answered_ = true;
  const bool stopped_by_string = stop_.stopped();
  // A turn this front cancelled because of a stop string is a success with what it showed.
  const bool ok = status.ok() || (stopped_by_string && options_.cancel_on_stop &&
                                  status.code() == absl::StatusCode::kCancelled);
  Record(status, result);
  if (!ok || client_gone_) {
    if (client_gone_) return;
    if (stream_started_) {
      exchange_->SetStatus(status);
      exchange_->Write(options_.api == ChatTurnOptions::Api::kResponse
                           ? ResponseFailedEvent(options_.head, options_.previous_response_id,
                                                 status, &sequence_)
                           : absl::StrCat("data: ", ErrorJson(status), "\n\n"));
      exchange_->End();
    } else {
      exchange_->RespondError(status, retry_after_ms);
    }
    return;
  }
  EmitEchoLocked();  // a turn that generated nothing (max_tokens 0) still echoes
  std::string tail = decoder_.Flush();
  std::string visible = stop_.Push(tail);
  if (!stop_.stopped()) visible += stop_.Flush();
  ChatAnswer answer = options_.head;
  answer.finish_reason = stop_.stopped() ? "stop" : result.finish_reason;
  answer.usage.prompt_tokens = status.ok() ? result.prompt_tokens : prompt_tokens_;
  answer.usage.completion_tokens = status.ok() ? result.generated_tokens : generated_;
  answer.usage.tokens_folded = result.tokens_folded;
  answer.usage.version = status.ok() ? result.version : 0;
  answer.usage.replica = result.replica;
  if (options_.api == ChatTurnOptions::Api::kResponse && status.ok()) {
    answer.id = ResponseId(answer.usage.session_id, result.version);
  }
  if (options_.stream && options_.api == ChatTurnOptions::Api::kResponse) {
    EmitLocked(visible, {}, "");
    StartStreamLocked();  // a turn that generated no text still streams its events
    answer.text = text_;
    answer.logprobs = std::move(logprobs_);
    exchange_->Write(ResponseStreamEnd(answer, options_.previous_response_id, &sequence_));
    exchange_->End();
  } else if (options_.stream) {
    EmitLocked(visible, {}, "");
    EmitLocked("", {}, answer.finish_reason);
    if (options_.include_usage) {
      exchange_->Write(UsageChunkEvent(answer, options_.api == ChatTurnOptions::Api::kChat));
    }
    exchange_->Write(std::string(kDoneEvent));
    exchange_->End();
  } else {
    answer.text = text_ + visible;
    answer.logprobs = std::move(logprobs_);
    std::string body;
    switch (options_.api) {
      case ChatTurnOptions::Api::kChat:
        body = ChatCompletionJson(answer);
        break;
      case ChatTurnOptions::Api::kCompletion:
        body = CompletionJson(answer);
        break;
      case ChatTurnOptions::Api::kResponse:
        body = ResponseJson(answer, options_.previous_response_id);
        break;
    }
    exchange_->Respond(200, "application/json", std::move(body));
  }
}

void ChatTurn::Record(const absl::Status& status, const TurnResult& result) {
  const uint32_t generated = status.ok() ? result.generated_tokens : generated_;
  const uint32_t prompt_tokens = status.ok() ? result.prompt_tokens : prompt_tokens_;
  if (!status.ok() && generated_ == 0) return;  // refused before any work
  exchange_->Annotate([&](logging::RequestRecord* r) {
    if (result.version != 0) r->version = result.version;
    r->timings_ms = result.timings_ms;
    r->counts = {{"prompt_tokens", prompt_tokens},
                 {"generated_tokens", generated},
                 {"folded_tokens", result.tokens_folded},
                 {"restored_from_store", result.restored_from_store ? 1 : 0}};
  });
}

}  // namespace kvfold::http
