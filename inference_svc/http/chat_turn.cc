// ChoiceSet and ChatTurn (chat_turn.h).
#include "inference_svc/http/chat_turn.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvfold::http {
namespace {

// The finish reason of an answer read as calls of `tools`.
std::string CallsFinish(const ToolSet& tools) {
  return tools.legacy ? std::string(kFunctionCallFinish) : "tool_calls";
}

}  // namespace

ChoiceSet::ChoiceSet(ChatTurnOptions options, int count, std::shared_ptr<ObservedExchange> exchange,
                     const Tokenizer* tokenizer)
    : options_(std::move(options)),
      count_(count),
      exchange_(std::move(exchange)),
      tokenizer_(tokenizer),
      turns_(count) {}

void ChoiceSet::Watch() {
  std::weak_ptr<ChoiceSet> weak = weak_from_this();
  exchange_->OnClientGone([weak] {
    auto self = weak.lock();
    if (self == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->closed_ = true;
    }
    self->CancelChoices(-1);
  });
}

std::shared_ptr<ChatTurn> ChoiceSet::Choice(int index, std::string echo) {
  auto turn = std::make_shared<ChatTurn>(shared_from_this(), index, std::move(echo));
  std::lock_guard<std::mutex> lock(mu_);
  turns_[index] = turn;
  return turn;
}

bool ChoiceSet::closed() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void ChoiceSet::CancelChoices(int except) {
  std::vector<std::shared_ptr<ChatTurn>> turns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < count_; ++i) {
      if (i == except) continue;
      if (auto t = turns_[i].lock()) turns.push_back(std::move(t));
    }
  }
  for (const auto& t : turns) t->Cancel();
}

void ChoiceSet::StartStreamLocked() {
  if (stream_started_) return;
  stream_started_ = true;
  exchange_->StartStream(200, "text/event-stream", options_.headers);
  if (options_.api == ChatTurnOptions::Api::kResponse) {
    exchange_->Write(ResponseStreamStart(options_.head, options_.response_echo, &sequence_));
  }
}

void ChoiceSet::Stream(const std::function<std::string(int* sequence)>& event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  StartStreamLocked();
  std::string text = event(&sequence_);
  if (!text.empty()) exchange_->Write(std::move(text));
}

void ChoiceSet::Record(int index, const absl::Status& status, const TurnResult& result,
                       uint32_t prompt_tokens, uint32_t generated) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index % options_.choices_per_prompt == 0) record_prompt_tokens_ += prompt_tokens;
  record_generated_ += generated;
  record_folded_ += result.tokens_folded;
  if (!status.ok() && generated == 0) return;  // refused before any work
  exchange_->Annotate([&](logging::RequestRecord* r) {
    if (index == 0) {
      if (result.version != 0) r->version = result.version;
      r->timings_ms = result.timings_ms;
    }
    r->counts = {{"prompt_tokens", record_prompt_tokens_},
                 {"generated_tokens", record_generated_},
                 {"folded_tokens", record_folded_},
                 {"restored_from_store", result.restored_from_store ? 1 : 0}};
  });
}

void ChoiceSet::Fail(int index, const absl::Status& status, int64_t retry_after_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    if (stream_started_) {
      exchange_->SetStatus(status);
      exchange_->Write(
          options_.api == ChatTurnOptions::Api::kResponse
              ? ResponseFailedEvent(options_.head, options_.response_echo, status, &sequence_)
              : absl::StrCat("data: ", ErrorJson(status), "\n\n"));
      exchange_->End();
    } else {
      exchange_->RespondError(status, retry_after_ms);
    }
  }
  CancelChoices(index);
}

void ChoiceSet::Finish(ChatAnswer choice) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  done_.push_back(std::move(choice));
  if (static_cast<int>(done_.size()) < count_) return;
  std::sort(done_.begin(), done_.end(),
            [](const ChatAnswer& a, const ChatAnswer& b) { return a.index < b.index; });
  // The first choice's session, version and replica; token counts over all choices (each
  // prompt's tokens once).
  TurnUsage usage = done_.front().usage;
  usage.prompt_tokens = usage.cached_tokens = usage.completion_tokens = usage.tokens_folded = 0;
  for (const ChatAnswer& c : done_) {
    if (c.index % options_.choices_per_prompt == 0) {
      usage.prompt_tokens += c.usage.prompt_tokens;
      usage.cached_tokens += c.usage.cached_tokens;
    }
    usage.completion_tokens += c.usage.completion_tokens;
    usage.tokens_folded += c.usage.tokens_folded;
  }
  if (options_.stream && options_.api == ChatTurnOptions::Api::kResponse) {
    StartStreamLocked();  // a turn that generated no text still streams its events
    exchange_->Write(ResponseStreamEnd(done_.front(), options_.response_echo, &sequence_));
    exchange_->End();
    return;
  }
  if (options_.stream) {
    StartStreamLocked();
    if (options_.include_usage) {
      ChatAnswer head = options_.head;
      head.usage = usage;
      exchange_->Write(UsageChunkEvent(head, options_.api == ChatTurnOptions::Api::kChat));
    }
    exchange_->Write(std::string(kDoneEvent));
    exchange_->End();
    return;
  }
  std::string body;
  switch (options_.api) {
    case ChatTurnOptions::Api::kChat:
      body = ChatCompletionJson(done_, usage);
      break;
    case ChatTurnOptions::Api::kCompletion:
      body = CompletionJson(done_, usage);
      break;
    case ChatTurnOptions::Api::kResponse:
      body = ResponseJson(done_.front(), options_.response_echo);
      break;
  }
  exchange_->Respond(200, "application/json", std::move(body), options_.headers);
}

ChatTurn::ChatTurn(std::shared_ptr<ChoiceSet> set, int index, std::string echo)
    : set_(std::move(set)),
      options_(set_->options()),
      index_(index),
      echo_(std::move(echo)),
      tokenizer_(set_->tokenizer()),
      decoder_(tokenizer_, /*at_text_start=*/false),
      stop_(options_.stop) {}

void ChatTurn::Attach(std::shared_ptr<RunningTurn> turn) {
  const uint32_t prompt_tokens = turn->prompt_tokens();  // before mu_: the port locks too
  std::lock_guard<std::mutex> lock(mu_);
  turn_ = std::move(turn);
  prompt_tokens_ = prompt_tokens;
  if (set_->closed() || (stop_.stopped() && options_.cancel_on_stop)) CancelLocked();
}

void ChatTurn::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  CancelLocked();
}

void ChatTurn::CancelLocked() {
  if (turn_ != nullptr) turn_->Cancel();
}

void ChatTurn::Fail(const absl::Status& status, int64_t retry_after_ms) {
  OnDone(status, TurnResult{}, retry_after_ms);
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
  ChatAnswer head = options_.head;
  head.index = index_;
  const bool first = first_chunk_;
  set_->Stream([&](int* sequence) -> std::string {
    switch (options_.api) {
      case ChatTurnOptions::Api::kChat:
        return ChatChunkEvent(head, text, first, finish_reason, logprobs);
      case ChatTurnOptions::Api::kCompletion:
        return CompletionChunkEvent(head, text, finish_reason, logprobs);
      case ChatTurnOptions::Api::kResponse:
        // The finish reason goes into the closing events (ResponseStreamEnd).
        if (text.empty() && logprobs.empty()) return "";
        return ResponseTextDeltaEvent(head, text, logprobs, sequence);
    }
    return "";
  });
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
    if (std::find(options_.stop_token_ids.begin(), options_.stop_token_ids.end(), ids[i]) !=
        options_.stop_token_ids.end()) {
      continue;  // the turn's last token
    }
    text += decoder_.Push(ids[i]);
    if (options_.logprobs && i < logprobs.size()) shown.push_back(Shown(ids[i], &logprobs[i]));
  }
  std::string visible = stop_.Push(text);
  if (stop_.stopped()) {
    shown.clear();  // the tokens of a stop string are not shown
    if (options_.cancel_on_stop) CancelLocked();
  }
  EmitContentLocked(visible, std::move(shown));
}

void ChatTurn::EmitContentLocked(const std::string& text, std::vector<TokenLogprob> logprobs) {
  if (options_.tools == nullptr || !options_.stream) {
    EmitLocked(text, std::move(logprobs), "");
    return;
  }
  tool_text_ += text;
  unsent_logprobs_.insert(unsent_logprobs_.end(), std::make_move_iterator(logprobs.begin()),
                          std::make_move_iterator(logprobs.end()));
  if (options_.tools->choice != ToolChoice::kAuto || holding_) {
    held_ += text;
    return;
  }
  if (options_.tools->style != ToolCallStyle::kTagged) {
    // Calls are the whole answer: held when it opens as they do (Llama 3.1: '{' or a tag;
    // Mistral: the list's '['), else shown.
    const bool mistral = options_.tools->style == ToolCallStyle::kMistral;
    if (!decided_) {
      pending_ += text;
      const size_t first = pending_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return;
      decided_ = true;
      const char c = pending_[first];
      if (mistral ? c == '[' : (c == '{' || c == '<')) {
        holding_ = true;
        held_ = std::move(pending_);
        pending_.clear();
        return;
      }
      EmitLocked(pending_, std::move(unsent_logprobs_), "");
      pending_.clear();
    } else {
      EmitLocked(text, std::move(unsent_logprobs_), "");
    }
    unsent_logprobs_.clear();
    return;
  }
  pending_ += text;
  size_t shown = pending_.size();
  if (const size_t open = pending_.find(kToolCallOpen); open != std::string::npos) {
    holding_ = true;
    held_ = pending_.substr(open);
    shown = open;
  } else {
    // Keep the longest end of the text that may begin the tag.
    for (size_t keep = std::min(pending_.size(), kToolCallOpen.size() - 1); keep > 0; --keep) {
      if (kToolCallOpen.starts_with(std::string_view(pending_).substr(pending_.size() - keep))) {
        shown = pending_.size() - keep;
        break;
      }
    }
  }
  if (shown == 0) return;
  EmitLocked(pending_.substr(0, shown), std::move(unsent_logprobs_), "");
  unsent_logprobs_.clear();
  pending_ = holding_ ? std::string() : pending_.substr(shown);
}

void ChatTurn::FinishToolStreamLocked(ChatAnswer* answer) {
  ToolAnswer read = ReadToolAnswer(tool_text_, *options_.tools);
  if (read.calls.empty()) {
    EmitLocked(pending_ + held_, std::move(unsent_logprobs_), "");
    return;
  }
  answer->finish_reason = CallsFinish(*options_.tools);
  if (options_.api == ChatTurnOptions::Api::kResponse) {
    // A response's closing events carry the calls (ResponseStreamEnd).
    answer->tool_calls = std::move(read.calls);
    return;
  }
  ChatAnswer head = options_.head;
  head.index = index_;
  const bool first = first_chunk_;
  std::vector<TokenLogprob> logprobs = std::move(unsent_logprobs_);
  set_->Stream([&](int*) {
    return ChatToolCallsChunkEvent(head, read.calls, first, logprobs, options_.tools->legacy);
  });
  first_chunk_ = false;
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
  if (echo_.empty() && echo_logprobs_.empty()) return;
  EmitLocked(echo_, std::move(echo_logprobs_), "");
}

void ChatTurn::CompleteLocked() {
  if (completed_.has_value()) return;
  EmitEchoLocked();  // a turn that generated nothing (max_tokens 0) still echoes
  std::string tail = decoder_.Flush();
  std::string visible = stop_.Push(tail);
  if (!stop_.stopped()) visible += stop_.Flush();
  ChatAnswer answer = options_.head;
  answer.index = index_;
  if (stop_.stopped()) answer.finish_reason = "stop";
  EmitContentLocked(visible, {});
  if (options_.tools != nullptr && options_.stream) FinishToolStreamLocked(&answer);
  answer.text = std::move(text_);
  answer.logprobs = std::move(logprobs_);
  if (options_.tools != nullptr && !options_.stream) {
    ToolAnswer read = ReadToolAnswer(answer.text, *options_.tools);
    if (!read.calls.empty()) {
      answer.text = std::move(read.content);
      answer.tool_calls = std::move(read.calls);
      answer.finish_reason = CallsFinish(*options_.tools);
    }
  }
  completed_ = std::move(answer);
}

std::optional<std::string> ChatTurn::CommitRecord() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.keep_record || answered_) return std::nullopt;
  CompleteLocked();
  return StoredResponseJson(
      {.answer = *completed_, .echo = options_.response_echo, .input_items = options_.input_items});
}

void ChatTurn::OnDone(const absl::Status& status, const TurnResult& result,
                      int64_t retry_after_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (answered_) return;
  answered_ = true;
  const bool stopped_by_string = stop_.stopped();
  // A turn this front cancelled because of a stop string is a success with what it showed.
  const bool ok = status.ok() || (stopped_by_string && options_.cancel_on_stop &&
                                  status.code() == absl::StatusCode::kCancelled);
  set_->Record(index_, status, result, status.ok() ? result.prompt_tokens : prompt_tokens_,
               status.ok() ? result.generated_tokens : generated_);
  if (!ok) {
    lock.unlock();  // Fail cancels the other choices, which take their own locks
    set_->Fail(index_, status, retry_after_ms);
    return;
  }
  CompleteLocked();
  ChatAnswer answer = std::move(*completed_);
  completed_.reset();
  if (answer.finish_reason.empty()) answer.finish_reason = result.finish_reason;
  answer.usage.prompt_tokens = status.ok() ? result.prompt_tokens : prompt_tokens_;
  answer.usage.cached_tokens = status.ok() ? result.cached_prompt_tokens : 0;
  answer.usage.completion_tokens = status.ok() ? result.generated_tokens : generated_;
  answer.usage.tokens_folded = result.tokens_folded;
  answer.usage.version = status.ok() ? result.version : 0;
  answer.usage.replica = result.replica;
  if (options_.api == ChatTurnOptions::Api::kResponse && status.ok()) {
    answer.id = ResponseId(answer.usage.session_id, result.version);
  }
  if (options_.stream && options_.api != ChatTurnOptions::Api::kResponse) {
    EmitLocked("", {}, answer.finish_reason);
  }
  set_->Finish(std::move(answer));
}

}  // namespace kvfold::http
