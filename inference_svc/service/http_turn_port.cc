// RuntimeTurnPort (http_turn_port.h).
#include "inference_svc/service/http_turn_port.h"

#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/block_checksum.h"
#include "core/status_macros.h"
#include "inference_svc/service/store_sessions.h"
#include "inference_svc/service/validation.h"

namespace kvfold::service {

TaskPool::TaskPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
          if (tasks_.empty()) return;
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        task();
      }
    });
  }
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TaskPool::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

namespace {

std::vector<http::TokenLogprobIds> ToHttp(const std::vector<engine::TokenLogprobs>& logprobs) {
  std::vector<http::TokenLogprobIds> out(logprobs.size());
  for (size_t i = 0; i < logprobs.size(); ++i) {
    out[i].logprob = logprobs[i].logprob;
    for (int k = 0; k < logprobs[i].num_top; ++k) {
      out[i].top.emplace_back(logprobs[i].top_ids[k], logprobs[i].top_logprobs[k]);
    }
  }
  return out;
}

// One runtime turn seen through http::RunningTurn. Progress notifications start at most
// one drain at a time (a notification during a drain makes it loop once more), so tokens
// reach the observer in order and one consumer at a time calls the handle. The end is
// finished (checkpointed) on the finish pool. No lock is held while the observer runs:
// it may call Cancel().
class RuntimeTurn final : public http::RunningTurn,
                          public std::enable_shared_from_this<RuntimeTurn> {
 public:
  RuntimeTurn(std::shared_ptr<http::TurnObserver> observer, TaskPool* drain, TaskPool* finish,
              std::shared_ptr<std::atomic<int>> active, std::string replica,
              InferenceMetrics* metrics)
      : observer_(std::move(observer)),
        drain_(drain),
        finish_(finish),
        active_(std::move(active)),
        replica_(std::move(replica)),
        metrics_(metrics) {
    active_->fetch_add(1);
  }
  ~RuntimeTurn() override { active_->fetch_sub(1); }

  void SetHandle(std::unique_ptr<runtime::TurnHandle> handle) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      handle_ = std::move(handle);
    }
    Notify();  // catch up with what happened before the handle was stored
  }

  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (draining_) {
        again_ = true;
        return;
      }
      draining_ = true;
    }
    drain_->Post([self = shared_from_this()] { self->Drain(); });
  }

  void Cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (handle_ != nullptr) handle_->Cancel();
  }

  uint32_t prompt_tokens() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return handle_ != nullptr ? static_cast<uint32_t>(handle_->prompt_ids().size()) : 0;
  }

 private:
  void Drain() {
    for (;;) {
      tokens_.clear();
      logprobs_.clear();
      bool ended = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (handle_ == nullptr) {
          draining_ = false;
          return;
        }
        again_ = false;
        ended = handle_->Wait(absl::ZeroDuration(), &tokens_, &logprobs_);
      }
      if (!prompt_scored_ && (ended || !tokens_.empty())) {
        // The prompt's scores arrive with its first tokens, or with the end.
        prompt_scored_ = true;
        std::vector<engine::TokenLogprobs> scored;
        std::vector<int32_t> ids;
        {
          std::lock_guard<std::mutex> lock(mu_);
          handle_->TakePromptLogprobs(&scored);
          if (!scored.empty()) ids = handle_->prompt_ids();
        }
        if (!scored.empty()) observer_->OnPromptLogprobs(ids, ToHttp(scored));
      }
      if (!tokens_.empty()) observer_->OnTokens(tokens_, ToHttp(logprobs_));
      if (ended) {  // draining_ stays set: nothing drains after the end
        finish_->Post([self = shared_from_this()] { self->Finish(); });
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (!again_) {
        draining_ = false;
        return;
      }
    }
  }

  void Finish() {
    // Only this task consumes the handle now; Cancel is an atomic store inside it.
    std::optional<runtime::TurnRecord> record;
    if (std::optional<std::string> front = observer_->CommitRecord(); front.has_value()) {
      record.emplace();
      record->front_record = std::move(*front);
      record->replica = replica_;
    }
    absl::StatusOr<runtime::TurnUsage> usage = handle_->Finish(std::move(record));
    if (metrics_ != nullptr) metrics_->TurnFinished(usage);
    http::TurnResult result;
    int64_t retry_after_ms = 0;
    if (usage.ok()) {
      result.finish_reason =
          usage->finish_reason == runtime::FinishReason::kLength ? "length" : "stop";
      result.prompt_tokens = usage->prompt_tokens;
      result.cached_prompt_tokens = usage->cached_prompt_tokens;
      result.generated_tokens = usage->generated_tokens;
      result.tokens_folded = static_cast<uint32_t>(usage->tokens_folded);
      result.version = usage->version;
      result.replica = replica_;
      result.restored_from_store = usage->restored_from_store;
      result.timings_ms = TurnTimingsMs(*usage);
    } else if (auto after = runtime::RetryAfter(usage.status()); after.has_value()) {
      retry_after_ms = absl::ToInt64Milliseconds(*after);
    }
    std::shared_ptr<http::TurnObserver> observer = std::move(observer_);
    observer->OnDone(usage.status(), result, retry_after_ms);
  }

  std::shared_ptr<http::TurnObserver> observer_;
  TaskPool* const drain_;
  TaskPool* const finish_;
  const std::shared_ptr<std::atomic<int>> active_;
  const std::string replica_;
  InferenceMetrics* const metrics_;
  mutable std::mutex mu_;
  std::unique_ptr<runtime::TurnHandle> handle_;
  bool draining_ = false;        // a Drain is queued or running (or the turn ended)
  bool again_ = false;           // a notification came during the drain
  std::vector<int32_t> tokens_;  // drain-owned
  bool prompt_scored_ = false;   // drain-owned: the prompt's scores were handed on
  std::vector<engine::TokenLogprobs> logprobs_;  // drain-owned; empty unless requested
};

}  // namespace

RuntimeTurnPort::RuntimeTurnPort(RuntimeTurnPortDeps deps, int drain_threads, int finish_threads)
    : deps_(std::move(deps)),
      sessions_(deps_.runtime, deps_.store, deps_.kv_bytes_per_token),
      finish_pool_(finish_threads),
      drain_pool_(drain_threads) {}

RuntimeTurnPort::~RuntimeTurnPort() { Drain(absl::ZeroDuration()); }

void RuntimeTurnPort::Drain(absl::Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  while (active_->load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lock(turns_mu_);
    for (const auto& weak : turns_) {
      if (auto turn = weak.lock()) turn->Cancel();
    }
  }
  // Cancelled turns end within a scheduler step; their checkpoints are skipped.
  for (int i = 0; i < 3000 && active_->load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

absl::StatusOr<http::Caller> RuntimeTurnPort::Authenticate(std::string_view authorization) {
  if (deps_.draining && deps_.draining()) {
    return absl::UnavailableError("the replica is draining (shutting down)");
  }
  http::Caller caller;
  if (!authorization.empty()) {
    constexpr std::string_view kBearer = "Bearer ";
    if (!authorization.starts_with(kBearer) || authorization.size() == kBearer.size()) {
      return absl::UnauthenticatedError("the Authorization header must be 'Bearer <token>'");
    }
    caller.token = std::string(authorization.substr(kBearer.size()));
  }
  caller.tenant = kDefaultTenant;
  if (deps_.tokens != nullptr) {
    if (caller.token.empty()) {
      return absl::UnauthenticatedError("missing 'Authorization: Bearer <token>'");
    }
    auto tenant = deps_.tokens->TenantOf(caller.token);
    if (!tenant.ok()) return tenant.status();
    caller.tenant = *tenant;
  }
  return caller;
}

runtime::Caller RuntimeTurnPort::ToRuntime(const http::Caller& caller) const {
  runtime::Caller out;
  out.tenant = caller.tenant;
  out.store_credential = caller.token.empty() ? deps_.store_token : caller.token;
  return out;
}

absl::Status RuntimeTurnPort::CreateSession(const http::Caller& caller,
                                            const std::string& session_id) {
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;  // not a random id
  v1::CreateSessionRequest request;
  request.set_session_id(session_id);
  return sessions_.Create(ToRuntime(caller), request, nullptr);
}

absl::StatusOr<uint64_t> RuntimeTurnPort::HeadVersion(const http::Caller& caller,
                                                      const std::string& session_id) {
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  auto info = deps_.store->GetSessionInfo(ToRuntime(caller).store_credential, session_id);
  if (!info.ok()) return StoreError(info.status());
  return info->head_version();
}

absl::Status RuntimeTurnPort::ForkSession(const http::Caller& caller, const std::string& source,
                                          uint64_t version, const std::string& new_id) {
  if (absl::Status s = ValidateSessionId(new_id); !s.ok()) return s;  // not a random id
  v1::ForkSessionRequest request;
  request.set_source_session_id(source);
  request.set_version(version);
  request.set_new_session_id(new_id);
  return sessions_.Fork(ToRuntime(caller), request, nullptr);
}

absl::StatusOr<memory::MemoryBlock> RuntimeTurnPort::VerifiedBlock(const http::Caller& caller,
                                                                   const std::string& session_id,
                                                                   uint64_t version) {
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  if (version == 0) return absl::NotFoundError("version 0 does not exist");
  auto block =
      deps_.store->GetBlock(ToRuntime(caller).store_credential, session_id, version, nullptr);
  if (!block.ok()) return StoreError(block.status());
  if (BlockChecksum(block->header, block->payload) != block->header.checksum() ||
      !TurnRecordIntact(block->header)) {
    return absl::DataLossError(
        absl::StrCat("version ", version, " of session ", session_id, ": checksum mismatch"));
  }
  return block;
}

absl::StatusOr<http::StoredTurn> RuntimeTurnPort::StoredTurnOf(const http::Caller& caller,
                                                               const std::string& session_id,
                                                               uint64_t version) {
  auto block = VerifiedBlock(caller, session_id, version);
  if (!block.ok()) return block.status();
  if (!block->header.has_turn()) {
    return absl::NotFoundError(absl::StrCat("version ", version, " of session ", session_id,
                                            " keeps no record of its turn"));
  }
  const v1::TurnRecord& t = block->header.turn();
  return http::StoredTurn{.front_record = t.front_record(),
                          .prompt_tokens = t.prompt_tokens(),
                          .cached_prompt_tokens = t.cached_prompt_tokens(),
                          .generated_tokens = t.generated_tokens(),
                          .tokens_folded = t.tokens_folded(),
                          .finish_reason = t.finish_reason(),
                          .replica = t.replica()};
}

// The runtime restores a version with the same last token (Runtime::LiveFromCheckpoint), so a
// turn that continues it renders as this tail says.
absl::StatusOr<http::SessionTail> RuntimeTurnPort::TailOf(const http::Caller& caller,
                                                          const std::string& session_id,
                                                          uint64_t version) {
  auto block = VerifiedBlock(caller, session_id, version);
  if (!block.ok()) return block.status();
  const auto& window = block->header.window_token_ids();
  return http::SessionTail{.total_tokens = block->header.total_tokens(),
                           .last_token = window.empty() ? -1 : window[window.size() - 1]};
}

namespace {

// The gRPC API's message in protobuf's JSON mapping, the .proto's field names, zeros kept.
std::string ApiJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

// `json` (empty: all defaults) as `out`, strictly: unknown fields are refused.
absl::Status FromApiJson(const std::string& json, google::protobuf::Message* out) {
  if (json.empty()) return absl::OkStatus();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, out, options);
  if (parsed.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the body is not a ", out->GetDescriptor()->name(),
                                                 ": ", parsed.message().as_string()));
}

// The path's session id in the request's id field, which the body may only repeat.
absl::Status TakePathId(const std::string& path_id, std::string* field, const char* name) {
  if (!field->empty() && *field != path_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is '", *field, "' but the path names '", path_id, "'"));
  }
  *field = path_id;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> RuntimeTurnPort::SessionCall(const http::Caller& caller,
                                                         http::SessionOp op,
                                                         const std::string& session_id,
                                                         const std::string& request_json) {
  const runtime::Caller who = ToRuntime(caller);
  // Parses `request_json` into `request` (the path's id into its `id_field` when given),
  // runs `call` into `response` and prints it.
  auto serve = [&](auto request, auto response, auto id_field, const char* id_name,
                   auto call) -> absl::StatusOr<std::string> {
    KVFOLD_RETURN_IF_ERROR(FromApiJson(request_json, &request));
    if constexpr (!std::is_same_v<decltype(id_field), std::nullptr_t>) {
      KVFOLD_RETURN_IF_ERROR(TakePathId(session_id, (request.*id_field)(), id_name));
    }
    KVFOLD_RETURN_IF_ERROR(call(request, &response));
    return ApiJson(response);
  };
  switch (op) {
    case http::SessionOp::kCreate:
      return serve(v1::CreateSessionRequest(), v1::Session(), nullptr, "",
                   [&](const auto& r, auto* out) { return sessions_.Create(who, r, out); });
    case http::SessionOp::kGet:
      return serve(
          v1::GetSessionRequest(), v1::Session(), &v1::GetSessionRequest::mutable_session_id,
          "session_id",
          [&](const auto& r, auto* out) { return sessions_.Get(who, r.session_id(), out); });
    case http::SessionOp::kList:
      return serve(v1::ListSessionsRequest(), v1::ListSessionsResponse(), nullptr, "",
                   [&](const auto& r, auto* out) { return sessions_.List(who, r, out); });
    case http::SessionOp::kDelete:
      return serve(
          v1::DeleteSessionRequest(), v1::DeleteSessionResponse(),
          &v1::DeleteSessionRequest::mutable_session_id, "session_id",
          [&](const auto& r, auto* out) { return sessions_.Delete(who, r.session_id(), out); });
    case http::SessionOp::kFork:
      return serve(v1::ForkSessionRequest(), v1::Session(),
                   &v1::ForkSessionRequest::mutable_source_session_id, "source_session_id",
                   [&](const auto& r, auto* out) { return sessions_.Fork(who, r, out); });
    case http::SessionOp::kRollback:
      return serve(v1::RollbackSessionRequest(), v1::Session(),
                   &v1::RollbackSessionRequest::mutable_session_id, "session_id",
                   [&](const auto& r, auto* out) { return sessions_.Rollback(who, r, out); });
  }
  return absl::InvalidArgumentError("unknown session operation");
}

namespace {

// A prompt group is a runtime prompt share (runtime::TurnRequest::prompt_share).
class SharedPrompt final : public http::PromptGroup {
 public:
  explicit SharedPrompt(int turns) : share(runtime::NewPromptShare(turns)) {}
  const std::shared_ptr<runtime::PromptShare> share;
};

}  // namespace

std::shared_ptr<http::PromptGroup> RuntimeTurnPort::GroupPrompt(int turns) {
  return std::make_shared<SharedPrompt>(turns);
}

absl::StatusOr<std::shared_ptr<http::RunningTurn>> RuntimeTurnPort::StartTurn(
    const http::Caller& caller, const http::TurnSpec& spec,
    std::shared_ptr<http::TurnObserver> observer) {
  if (!spec.session_id.empty()) {
    if (absl::Status s = ValidateSessionId(spec.session_id); !s.ok()) return s;
  }
  auto turn = std::make_shared<RuntimeTurn>(std::move(observer), &drain_pool_, &finish_pool_,
                                            active_, deps_.replica, deps_.metrics);
  runtime::TurnRequest request;
  request.session_id = spec.session_id;
  request.prompt_ids = spec.prompt_ids;
  request.messages = spec.messages;
  request.continue_final_message = spec.continue_final_message;
  request.tools = spec.tools;
  request.sampling.temperature = spec.temperature;
  request.sampling.top_p = spec.top_p;
  request.sampling.top_k = spec.top_k;
  request.sampling.seed = spec.seed;
  request.sampling.presence_penalty = spec.presence_penalty;
  request.sampling.frequency_penalty = spec.frequency_penalty;
  request.sampling.repetition_penalty = spec.repetition_penalty;
  request.sampling.min_p = spec.min_p;
  request.sampling.logit_bias = spec.logit_bias;
  request.sampling.max_new_tokens = spec.max_new_tokens;
  request.sampling.stop_token_ids = spec.stop_token_ids;
  request.sampling.ignore_eos = spec.ignore_eos;
  request.sampling.min_tokens = spec.min_tokens;
  request.top_logprobs = spec.top_logprobs;
  request.prompt_logprobs = spec.prompt_logprobs;
  if (const auto* group = dynamic_cast<const SharedPrompt*>(spec.prompt_group.get())) {
    request.prompt_share = group->share;
  }
  request.prompt_only = spec.prompt_only;
  switch (spec.format) {
    case http::OutputFormat::kText:
      break;
    case http::OutputFormat::kJsonObject:
      request.response_format.kind = runtime::ResponseFormat::Kind::kJsonObject;
      break;
    case http::OutputFormat::kJsonSchema:
      request.response_format.kind = runtime::ResponseFormat::Kind::kJsonSchema;
      request.response_format.json_schema = spec.json_schema;
      request.response_format.lenient = spec.lenient_schema;
      request.response_format.grammar = spec.grammar;
      break;
    case http::OutputFormat::kChoice:
      request.response_format.kind = runtime::ResponseFormat::Kind::kChoice;
      request.response_format.choices = spec.choices;
      break;
  }
  // Greedy must not inherit a session's non-zero default temperature.
  if (spec.temperature <= 0) request.sampling.top_k = 1;
  std::weak_ptr<RuntimeTurn> weak = turn;
  request.on_progress = [weak] {
    if (auto t = weak.lock()) t->Notify();
  };
  auto handle = deps_.runtime->StartTurn(ToRuntime(caller), std::move(request));
  if (!handle.ok()) {
    if (deps_.metrics != nullptr) deps_.metrics->TurnFinished(handle.status());
    return handle.status();
  }
  turn->SetHandle(std::move(*handle));
  {
    std::lock_guard<std::mutex> lock(turns_mu_);
    std::erase_if(turns_, [](const auto& weak) { return weak.expired(); });
    turns_.push_back(turn);
  }
  return std::shared_ptr<http::RunningTurn>(turn);
}

}  // namespace kvfold::service
