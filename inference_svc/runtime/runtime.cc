#include "inference_svc/runtime/runtime.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "core/session_geometry.h"
#include "inference_svc/runtime/session_factory.h"

namespace kvfold::runtime {
namespace {

double MsSince(TurnJob::Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(TurnJob::Clock::now() - t).count();
}

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(0, absl::ToInt64Milliseconds(d)));
}

}  // namespace

// ---- TurnHandle --------------------------------------------------------------------

TurnHandle::~TurnHandle() {
  if (finished_ || job_ == nullptr) return;
  Cancel();
  std::vector<int32_t> ignored;
  while (!job_->stream.Wait(std::chrono::milliseconds(50), &ignored)) ignored.clear();
  Settle();
}

bool TurnHandle::Wait(absl::Duration timeout, std::vector<int32_t>* tokens,
                      std::vector<engine::TokenLogprobs>* logprobs) {
  return job_->stream.Wait(ToChrono(timeout), tokens, logprobs);
}

void TurnHandle::TakePromptLogprobs(std::vector<engine::TokenLogprobs>* out) {
  job_->stream.TakePromptLogprobs(out);
}

void TurnHandle::Cancel() { job_->cancelled.store(true); }

void TurnHandle::Settle() {
  finished_ = true;
  if (key_.empty()) return;
  const absl::Status status = job_->stream.status();
  // A turn that ran and failed (or was cancelled) dropped its derived state; a turn that
  // was never admitted left the cached copy as it was.
  if (!status.ok() && job_->admitted.load()) {
    live_->version.store(0);
    runtime_->table_.Erase(key_);
  }
  runtime_->table_.Release(key_);
}

absl::StatusOr<TurnUsage> TurnHandle::Finish(std::optional<TurnRecord> record) {
  if (finished_) return absl::FailedPreconditionError("Finish was called already");
  std::vector<int32_t> ignored;
  while (!job_->stream.Wait(std::chrono::milliseconds(100), &ignored)) ignored.clear();
  const absl::Status outcome = job_->stream.status();
  if (!outcome.ok()) {
    Settle();
    return outcome;
  }
  TurnJob& job = *job_;
  TurnUsage usage;
  const auto checkpoint_start = TurnJob::Clock::now();
  if (!key_.empty()) {
    Checkpoint checkpoint;
    checkpoint.state = std::move(job.final_state);
    checkpoint.sampling = live_->sampling;
    checkpoint.rng_state = job.final_rng_state;
    if (record.has_value()) {
      record->prompt_tokens = static_cast<uint32_t>(job.prompt_ids.size());
      record->cached_prompt_tokens = job.cached_prompt_tokens;
      record->generated_tokens = job.generated_tokens;
      record->tokens_folded = static_cast<uint32_t>(job.tokens_folded_in_turn);
      record->finish_reason = job.finish_reason == FinishReason::kLength ? "length" : "stop";
      checkpoint.turn = std::move(record);
    }
    absl::StatusOr<uint64_t> version =
        runtime_->deps_.store->Commit(caller_, session_id_, head_, checkpoint);
    if (!version.ok() && head_ == 0 && version.status().code() == absl::StatusCode::kAborted) {
      version = absl::AlreadyExistsError(absl::StrCat("session ", session_id_, " exists"));
    }
    if (!version.ok()) {
      // The derived state is ahead of the store: drop it; the store's head stays the truth.
      live_->version.store(0);
      runtime_->table_.Erase(key_);
      runtime_->table_.Release(key_);
      finished_ = true;
      return version.status();
    }
    live_->version.store(*version);
    runtime_->table_.Put(key_, live_);
    runtime_->table_.Release(key_);
    usage.version = *version;
  }
  finished_ = true;
  usage.checkpoint_ms = MsSince(checkpoint_start);
  usage.prompt_tokens = static_cast<uint32_t>(job.prompt_ids.size());
  usage.cached_prompt_tokens = job.cached_prompt_tokens;
  usage.generated_tokens = job.generated_tokens;
  usage.tokens_folded = job.tokens_folded_in_turn;
  usage.kv_bytes_resident = live_->kv_bytes_resident.load();
  usage.restored_from_store = restored_;
  usage.finish_reason = job.finish_reason;
  if (job.grammar != nullptr) usage.schema_skipped = job.grammar->skipped();
  usage.queue_ms = job.queue_ms;
  usage.restore_ms = fetch_ms_ + job.restore_ms;
  usage.prefill_ms = job.prefill_ms;
  usage.decode_ms = job.decode_ms;
  usage.fold_ms = job.fold_ms;
  usage.ttft_ms = job.generated_tokens > 0
                      ? job.ttft_ms + std::chrono::duration<double, std::milli>(
                                          job.submitted_at - call_start_)
                                          .count()
                      : 0;
  usage.total_ms = MsSince(call_start_);
  return usage;
}

// ---- Runtime -----------------------------------------------------------------------

Runtime::Runtime(const Deps& deps, const RuntimeOptions& options)
    : deps_(deps), options_(options), table_(options.session_cache_bytes) {
  if (deps.tokenizer != nullptr) {
    token_table_ = std::make_shared<structured::TokenTable>(*deps.tokenizer);
  }
  const engine::EngineOptions& e = deps.engine->options();
  geometry_.block_size = e.block_size;
  geometry_.transient_tokens = std::max(1, options.scheduler.prefill_chunk_tokens);
  if (deps.projector != nullptr) {
    // The prefix holds the projector's sink tokens too (docs/memory-mode.md "Sink tokens").
    geometry_.mem_slots = deps.projector->config().mem_slots + deps.projector->config().sink_tokens;
    geometry_.chunk_size = deps.projector->config().chunk_size;
  }
  scheduler_ = std::make_unique<Scheduler>(
      deps.engine, MakeSessionFactory(deps.engine, deps.projector),
      [this] { return table_.EvictIdle(); }, geometry_, options.scheduler);
}

Runtime::~Runtime() { Stop(); }

void Runtime::Stop() { scheduler_->Stop(); }

std::string Runtime::CacheKey(const Caller& caller, const std::string& session_id) {
  return absl::StrCat(caller.tenant, "\n", Sha256Hex(caller.store_credential), "\n", session_id);
}

void Runtime::Forget(const Caller& caller, const std::string& session_id) {
  table_.Erase(CacheKey(caller, session_id));
}

absl::StatusOr<SessionSpec> Runtime::ResolveSpec(const SessionRequest& r) const {
  SessionSpec spec;
  spec.mode = r.mode.value_or(options_.default_mode);
  if (r.window_size < 0 || r.sink_tokens < 0) {
    return absl::InvalidArgumentError("window_size and sink_tokens must be >= 0");
  }
  if (IsMemoryMode(spec.mode)) {
    if (deps_.projector == nullptr) {
      return absl::FailedPreconditionError(
          "memory modes need a projector: start the replica with --projector");
    }
    const int w = spec.mode == core::KvMode::kMemoryOnly
                      ? deps_.projector->config().memory_only_window
                      : deps_.projector->config().window_size;
    if (r.window_size != 0 && r.window_size != w) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window_size ", r.window_size, " differs from the projector's window ", w,
          " (memory modes take W and C from the projector)"));
    }
    spec.window_size = w;
    const memory::ProjectorConfig& p = deps_.projector->config();
    if (absl::Status s = core::ValidateSessionGeometry(
            {spec.mode, spec.window_size, p.sink_tokens, p.chunk_size, p.mem_slots});
        !s.ok()) {
      return s;
    }
    return spec;
  }
  if (spec.mode == core::KvMode::kFull) return spec;
  const int64_t window = r.window_size != 0
                             ? r.window_size
                             : (options_.default_window ? options_.default_window : 1024);
  const int64_t sink = spec.mode == core::KvMode::kSink
                           ? (r.sink_tokens != 0 ? r.sink_tokens : options_.default_sink)
                           : 0;
  if (absl::Status s = core::ValidateSessionGeometry({spec.mode, window, sink, 0, 0}); !s.ok()) {
    return s;
  }
  spec.window_size = static_cast<int>(window);
  spec.sink_tokens = static_cast<int>(sink);
  return spec;
}

absl::StatusOr<std::vector<int32_t>> Runtime::PromptIds(const TurnRequest& request,
                                                        bool session_empty,
                                                        int32_t last_token) const {
  const int forms = (request.prompt_text.empty() ? 0 : 1) + (request.prompt_ids.empty() ? 0 : 1) +
                    (request.messages.empty() ? 0 : 1);
  if (forms > 1) {
    return absl::InvalidArgumentError("set one of prompt, prompt_token_ids or messages");
  }
  const size_t max_tokens = static_cast<size_t>(std::max(0, options_.max_prompt_tokens));
  // Refuse absurd texts before tokenizing or rendering them (kMaxBytesPerPromptToken bytes
  // per token of the limit, runtime.h): tokenizing them first cost about a second of CPU
  // per megabyte only to refuse them for their token count.
  size_t text_bytes = request.prompt_text.size();
  for (const ChatMessage& m : request.messages) {
    text_bytes += m.content.size();
    for (const ChatToolCall& call : m.tool_calls) {
      text_bytes += call.name.size() + call.arguments.size();
    }
  }
  for (const std::string& tool : request.tools) text_bytes += tool.size();
  if (text_bytes > kMaxBytesPerPromptToken * max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.messages.empty() ? "prompt is " : "messages are ", text_bytes,
                     " bytes, too long (at most ", kMaxBytesPerPromptToken * max_tokens, ": ",
                     kMaxBytesPerPromptToken, " bytes per token of the prompt limit)"));
  }
  std::vector<int32_t> ids;
  if (!request.messages.empty()) {
    if (deps_.chat_template == nullptr) {
      return absl::FailedPreconditionError(
          "this replica has no tokenizer: send prompt_token_ids instead of messages");
    }
    // A session that holds tokens gets only the new messages, closing the assistant's
    // turn first unless the model ended it with its end-of-turn token.
    ChatRenderOptions render = deps_.chat_template->OptionsAfter(session_empty, last_token);
    render.continue_final_message = request.continue_final_message;
    render.add_generation_prompt = !request.continue_final_message;
    render.tools = request.tools;
    auto rendered = deps_.chat_template->RenderIds(request.messages, render);
    if (!rendered.ok()) return rendered.status();
    ids = std::move(*rendered);
  } else if (!request.prompt_text.empty()) {
    if (deps_.tokenizer == nullptr) {
      return absl::FailedPreconditionError(
          "this replica has no tokenizer: send prompt_token_ids instead of text");
    }
    auto encoded = deps_.tokenizer->Encode(request.prompt_text, /*add_bos=*/session_empty);
    if (!encoded.ok()) return encoded.status();
    ids = std::move(*encoded);
  } else {
    const int vocab_size = deps_.engine->config().vocab_size;
    for (int32_t id : request.prompt_ids) {
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt token id ", id, " outside [0, ", vocab_size, ")"));
      }
    }
    ids = request.prompt_ids;
  }
  if (ids.size() > max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt is ", ids.size(), " tokens (max ", max_tokens, ")"));
  }
  if (ids.empty() && session_empty) {
    // Nothing to condition on yet: start from BOS, like a plain `generate`.
    ids.push_back(deps_.engine->config().bos_token_id);
  }
  return ids;
}

std::shared_ptr<LiveSession> Runtime::NewLive(const std::string& session_id,
                                              const SessionSpec& spec,
                                              const SamplingSpec& defaults) const {
  auto live = std::make_shared<LiveSession>();
  live->session_id = session_id;
  live->spec = spec;
  live->sampling = defaults;
  live->rng_state = engine::Rng(defaults.seed).state();
  return live;
}

std::shared_ptr<LiveSession> Runtime::LiveFromCheckpoint(
    const std::string& session_id, Checkpoint checkpoint,
    std::optional<engine::SessionState>* restore) const {
  SessionSpec spec;
  spec.mode = checkpoint.state.mode;
  spec.window_size = checkpoint.state.window_size;
  spec.sink_tokens = checkpoint.state.sink_tokens;
  auto live = NewLive(session_id, spec, checkpoint.sampling);
  // xoshiro256** never leaves the all-zero state, and from it draws only zeros (every
  // sampled token would be the lowest id): such words were not written by a sampler, so
  // the RNG restarts from the session's seed instead (docs/service.md, "Resume").
  const bool all_zero = std::all_of(checkpoint.rng_state.begin(), checkpoint.rng_state.end(),
                                    [](uint64_t w) { return w == 0; });
  if (!all_zero) live->rng_state = checkpoint.rng_state;
  live->total_tokens.store(checkpoint.state.total_tokens);
  const auto& window = checkpoint.state.window_token_ids;
  live->last_token.store(window.empty() ? -1 : window.back());
  live->tokens_folded.store(checkpoint.state.tokens_folded);
  *restore = std::move(checkpoint.state);
  return live;
}

std::unique_ptr<TurnHandle> Runtime::Launch(
    const Caller& caller, const std::string& session_id, const std::string& key, uint64_t head,
    std::shared_ptr<LiveSession> live, std::optional<engine::SessionState> restore,
    std::vector<int32_t> prompt, const engine::SamplingParams& sampling,
    std::optional<uint64_t> reseed, std::function<void()> on_progress, int prompt_top_logprobs,
    std::shared_ptr<PromptShare> share, std::shared_ptr<const structured::Grammar> grammar) {
  int64_t resident = live->resident_tokens.load();
  if (restore.has_value()) {
    resident = static_cast<int64_t>(restore->window_token_ids.size() +
                                    restore->sink_token_ids.size()) +
               restore->mem_slots;
  }
  auto job = std::make_shared<TurnJob>(std::move(on_progress));
  job->live = live;
  job->restore_state = std::move(restore);
  job->prompt_ids = std::move(prompt);
  job->sampling = sampling;
  job->reseed = reseed;
  job->prompt_top_logprobs = prompt_top_logprobs;
  if (grammar != nullptr) {
    job->grammar = std::move(grammar);
    job->token_table = token_table_;
  }
  if (session_id.empty()) {
    job->share = share;
    job->choices = std::move(share);
    job->cache_scope = CacheKey(caller, "");
  }
  const int64_t prompt_tokens = static_cast<int64_t>(job->prompt_ids.size());
  job->reserve_blocks = ReserveBlocks(live->spec, geometry_,
                                      resident + prompt_tokens + std::max(0, sampling.max_new_tokens),
                                      prompt_tokens);
  auto handle = std::unique_ptr<TurnHandle>(new TurnHandle());
  handle->runtime_ = this;
  handle->caller_ = caller;
  handle->session_id_ = session_id;
  handle->key_ = key;
  handle->head_ = head;
  handle->restored_ = job->restore_state.has_value();
  handle->live_ = std::move(live);
  handle->job_ = job;
  scheduler_->Submit(std::move(job));
  return handle;
}

absl::StatusOr<uint64_t> Runtime::CreateSession(const Caller& caller,
                                                const std::string& session_id,
                                                const SessionRequest& request,
                                                const SamplingSpec& defaults,
                                                const std::string& system_prompt) {
  const auto call_start = TurnJob::Clock::now();
  auto spec = ResolveSpec(request);
  if (!spec.ok()) return spec.status();
  const int vocab_size = deps_.engine->config().vocab_size;
  if (absl::Status s = ValidateSampling(defaults, vocab_size, options_.max_new_tokens_cap);
      !s.ok()) {
    return s;
  }
  std::vector<int32_t> prompt;
  if (!system_prompt.empty()) {
    TurnRequest text;
    text.prompt_text = system_prompt;
    auto ids = PromptIds(text, /*session_empty=*/true, /*last_token=*/-1);
    if (!ids.ok()) return ids.status();
    prompt = std::move(*ids);
  }
  const std::string key = CacheKey(caller, session_id);
  if (!table_.Claim(key)) {
    return absl::AbortedError(
        absl::StrCat("session ", session_id, " has a call in progress on this replica"));
  }
  // Fail fast on an existing id (the create's compare-and-set would reject it anyway).
  auto existing = deps_.store->HeadVersion(caller, session_id);
  if (existing.ok() || existing.status().code() != absl::StatusCode::kNotFound) {
    table_.Release(key);
    if (existing.ok()) {
      return absl::AlreadyExistsError(absl::StrCat("session ", session_id, " exists"));
    }
    return existing.status();
  }
  engine::SamplingParams sampling = ResolveSampling(defaults, options_.default_max_new_tokens);
  sampling.max_new_tokens = 0;  // prefill only
  auto handle = Launch(caller, session_id, key, /*head=*/0, NewLive(session_id, *spec, defaults),
                       std::nullopt, std::move(prompt), sampling, std::nullopt, nullptr);
  handle->call_start_ = call_start;
  auto usage = handle->Finish();
  if (!usage.ok()) return usage.status();
  return usage->version;
}

absl::StatusOr<std::unique_ptr<TurnHandle>> Runtime::StartTurn(const Caller& caller,
                                                               TurnRequest request) {
  const auto call_start = TurnJob::Clock::now();
  const int vocab_size = deps_.engine->config().vocab_size;
  const int cap = options_.max_new_tokens_cap;
  if (absl::Status s = ValidateSampling(request.sampling, vocab_size, cap); !s.ok()) return s;
  for (auto [name, value] : {std::pair{"top_logprobs", request.top_logprobs},
                             std::pair{"prompt_logprobs", request.prompt_logprobs}}) {
    if (value < -1 || value > engine::kMaxTopLogprobs) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " ", value, " outside [0, ", engine::kMaxTopLogprobs, "]"));
    }
  }
  std::shared_ptr<const structured::Grammar> grammar;
  if (request.response_format.kind != ResponseFormat::Kind::kText) {
    if (token_table_ == nullptr) {
      return absl::FailedPreconditionError(
          "this replica has no tokenizer: structured output (response_format) needs one");
    }
    if (request.prompt_only) {
      return absl::InvalidArgumentError(
          "response_format needs a turn that generates (not prompt_only)");
    }
    if (request.response_format.kind == ResponseFormat::Kind::kJsonObject) {
      grammar = structured::Grammar::JsonObject();
    } else if (request.response_format.grammar != nullptr) {
      grammar = request.response_format.grammar;
    } else {
      const ResponseFormat& f = request.response_format;
      auto compiled =
          f.kind == ResponseFormat::Kind::kChoice
              ? structured::Grammar::Choice(f.choices)
              : structured::Grammar::FromSchema(f.json_schema, /*compact=*/true, f.lenient);
      if (!compiled.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("response_format: ", compiled.status().message()));
      }
      grammar = std::move(*compiled);
    }
  }
  const uint64_t turn_seed = request.sampling.seed;

  std::string key;
  uint64_t head = 0;
  std::shared_ptr<LiveSession> live;
  std::optional<engine::SessionState> restore;
  double fetch_ms = 0;
  if (request.session_id.empty()) {
    auto spec = ResolveSpec(request.ephemeral);
    if (!spec.ok()) return spec.status();
    live = NewLive("", *spec, SamplingSpec());
  } else {
    key = CacheKey(caller, request.session_id);
    // One turn per session on this replica, decided before anything is read or streamed.
    if (!table_.Claim(key)) {
      return absl::AbortedError(absl::StrCat("session ", request.session_id,
                                             " has a turn in progress on this replica; retry "
                                             "when it ends"));
    }
    auto release = [&](absl::Status s) {
      table_.Release(key);
      return s;
    };
    // The store's head is the truth: a cached copy is used only at that version.
    auto version = deps_.store->HeadVersion(caller, request.session_id);
    if (!version.ok()) return release(version.status());
    head = *version;
    live = table_.Get(key);
    if (live == nullptr || live->version.load() != head) {
      const auto fetch_start = TurnJob::Clock::now();
      auto checkpoint = deps_.store->Load(caller, request.session_id, head);
      if (!checkpoint.ok()) return release(checkpoint.status());
      live = LiveFromCheckpoint(request.session_id, std::move(*checkpoint), &restore);
      fetch_ms = MsSince(fetch_start);
    }
    request.sampling = MergeSampling(live->sampling, request.sampling);
    if (absl::Status s = ValidateSampling(request.sampling, vocab_size, cap); !s.ok()) {
      return release(s);
    }
  }
  const bool session_empty = live->total_tokens.load() == 0;
  auto prompt = PromptIds(request, session_empty, live->last_token.load());
  if (!prompt.ok()) {
    if (!key.empty()) table_.Release(key);
    return prompt.status();
  }
  const bool starts_text = session_empty && prompt->size() == 1 &&
                           (*prompt)[0] == deps_.engine->config().bos_token_id;
  // Only a seed the turn itself sets restarts the RNG (the session's default does not).
  std::optional<uint64_t> reseed;
  if (turn_seed != 0) reseed = turn_seed;
  engine::SamplingParams sampling =
      ResolveSampling(request.sampling, options_.default_max_new_tokens);
  sampling.top_logprobs = request.top_logprobs;
  if (request.prompt_only) sampling.max_new_tokens = 0;
  if (!request.messages.empty()) {
    for (int32_t id : deps_.chat_template->end_of_turn_ids()) sampling.stop_token_ids.push_back(id);
  }
  auto handle =
      Launch(caller, request.session_id, key, head, std::move(live), std::move(restore),
             std::move(*prompt), sampling, reseed, std::move(request.on_progress),
             request.prompt_logprobs, std::move(request.prompt_share), std::move(grammar));
  handle->call_start_ = call_start;
  handle->fetch_ms_ = fetch_ms;
  handle->starts_text_ = starts_text;
  return handle;
}

}  // namespace kvfold::runtime
