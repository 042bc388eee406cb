#include "inference_svc/runtime/scheduler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "inference_svc/memory/memory_session.h"

namespace kvfold::runtime {
namespace {

constexpr char kRetryAfterUrl[] = "type.kvfold/retry-after-ms";

}  // namespace

std::optional<absl::Duration> RetryAfter(const absl::Status& status) {
  auto payload = status.GetPayload(kRetryAfterUrl);  // absl::optional<absl::Cord>
  int64_t ms = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &ms)) return std::nullopt;
  return absl::Milliseconds(ms);
}

void TurnStream::PushToken(int32_t token, const engine::TokenLogprobs* logprobs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(token);
    if (logprobs != nullptr) pending_logprobs_.push_back(*logprobs);
  }
  Notify();
}

void TurnStream::End(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
    status_ = std::move(status);
  }
  Notify();
}

void TurnStream::Notify() {
  cv_.notify_all();
  if (on_progress_) on_progress_();
}

void TurnStream::SetPromptLogprobs(std::vector<engine::TokenLogprobs> logprobs) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_logprobs_ = std::move(logprobs);
}

void TurnStream::TakePromptLogprobs(std::vector<engine::TokenLogprobs>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  *out = std::move(prompt_logprobs_);
  prompt_logprobs_.clear();
}

bool TurnStream::Wait(std::chrono::milliseconds timeout, std::vector<int32_t>* out,
                      std::vector<engine::TokenLogprobs>* logprobs) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return ended_ || !pending_.empty(); });
  out->insert(out->end(), pending_.begin(), pending_.end());
  pending_.clear();
  if (logprobs != nullptr) {
    logprobs->insert(logprobs->end(), pending_logprobs_.begin(), pending_logprobs_.end());
  }
  pending_logprobs_.clear();
  return ended_;
}

bool TurnStream::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

absl::Status TurnStream::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

double Scheduler::MsSince(TurnJob::Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(TurnJob::Clock::now() - t).count();
}

double Scheduler::FoldSeconds(const engine::Session* session) {
  const auto* memory_session = dynamic_cast<const memory::MemorySession*>(session);
  return memory_session != nullptr ? memory_session->stats().fold_seconds : 0.0;
}

Scheduler::Scheduler(engine::Engine* engine, SessionFactory factory, EvictIdle evict_idle,
                     const KvGeometry& geometry, const SchedulerOptions& options)
    : engine_(engine),
      factory_(std::move(factory)),
      evict_idle_(std::move(evict_idle)),
      geometry_(geometry),
      options_(options),
      kv_pool_bytes_(static_cast<uint64_t>(engine->pool().num_blocks()) *
                     engine->pool().bytes_per_block()) {
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Submit(std::shared_ptr<TurnJob> job) {
  job->submitted_at = TurnJob::Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void Scheduler::Retire(engine::Session* session) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) {  // the loop has ended: nothing races with us any more
      delete session;
      return;
    }
    graveyard_.push_back(session);
  }
  cv_.notify_all();
}

EngineSessionDeleter Scheduler::Deleter() {
  return EngineSessionDeleter{[this](engine::Session* s) { Retire(s); }};
}

int Scheduler::queued_turns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<engine::Session*> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead.swap(graveyard_);
  }
  for (engine::Session* s : dead) delete s;
}

void Scheduler::DrainGraveyard() {
  std::vector<engine::Session*> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead.swap(graveyard_);
  }
  for (engine::Session* s : dead) {
    if (auto it = idle_blocks_.find(s); it != idle_blocks_.end()) {
      reserved_blocks_ -= it->second;
      idle_blocks_.erase(it);
    }
    delete s;
  }
}

void Scheduler::Loop() {
  std::vector<std::shared_ptr<TurnJob>> arrivals;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !queue_.empty() || !running_.empty() || !graveyard_.empty();
      });
      if (stop_ && queue_.empty() && running_.empty() && graveyard_.empty()) break;
      const size_t slots = static_cast<size_t>(std::max(0, options_.max_active_sessions));
      while (!queue_.empty() && running_.size() + arrivals.size() < slots) {
        arrivals.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    DrainGraveyard();
    for (auto& job : arrivals) Admit(std::move(job));
    arrivals.clear();

    for (Running& r : running_) {
      if (r.phase != Phase::kFinish && r.job->cancelled.load()) {
        Fail(r, absl::CancelledError("the client cancelled the call or its deadline passed"));
      }
    }
    PromptStep();
    DecodeStep();
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [](const Running& r) { return r.phase == Phase::kFinish; }),
                   running_.end());
    active_count_.store(static_cast<int>(running_.size()));
    RefreshStats();
  }
  active_count_.store(0);
  // The prefix cache's sessions retire here (Stop deletes them after the join).
  prefix_cache_.clear();
}

absl::Status Scheduler::Busy(int need_blocks) const {
  // Estimate when room frees up: the running turn closest to its end, at the current
  // decode step rate (at least one step of 10 ms per remaining token).
  int64_t soonest = -1;
  for (const Running& r : running_) {
    const int64_t left = static_cast<int64_t>(r.job->prompt_ids.size() - r.prompt_pos) /
                             std::max(1, options_.prefill_chunk_tokens) +
                         std::max(0, r.job->sampling.max_new_tokens -
                                         static_cast<int>(r.job->generated_tokens)) + 1;
    if (soonest < 0 || left < soonest) soonest = left;
  }
  const double step_ms = std::max(10.0, decode_step_ms_);
  const int64_t retry_ms = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(step_ms * static_cast<double>(std::max<int64_t>(soonest, 1)))),
      100, 60000);
  const uint64_t block_bytes = engine_->pool().bytes_per_block();
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      "the KV pool is busy: the turn needs ", need_blocks, " blocks (",
      static_cast<uint64_t>(need_blocks) * block_bytes, " bytes), ",
      engine_->pool().num_blocks() - reserved_blocks_, " of ", engine_->pool().num_blocks(),
      " are not reserved by running turns; retry in ", retry_ms, " ms"));
  status.SetPayload(kRetryAfterUrl, absl::Cord(absl::StrCat(retry_ms)));
  return status;
}

void Scheduler::Admit(std::shared_ptr<TurnJob> job) {
  // Admitted or ended here: either way a member of a prompt share is settled.
  if (job->share != nullptr) ++job->share->settled;
  if (job->cancelled.load()) {
    job->stream.End(absl::CancelledError("the client cancelled the call or its deadline passed"));
    return;
  }
  const int pool_blocks = engine_->pool().num_blocks();
  const int need = job->reserve_blocks;
  if (need > pool_blocks) {
    rejected_turns_.fetch_add(1);
    job->stream.End(absl::ResourceExhaustedError(absl::StrCat(
        "the turn needs ", need, " KV blocks (",
        static_cast<uint64_t>(need) * engine_->pool().bytes_per_block(),
        " bytes) but the whole pool holds ", pool_blocks,
        ": it cannot run on this replica (shorten the prompt or max_new_tokens, or use a "
        "windowed or memory mode)")));
    return;
  }
  // The session's own idle blocks become part of its reservation.
  const engine::Session* own = job->live->engine_session.get();
  auto own_blocks = [&] {
    auto it = own == nullptr ? idle_blocks_.end() : idle_blocks_.find(own);
    return it == idle_blocks_.end() ? 0 : it->second;
  };
  // Evict only when dropping every idle session would make room: running turns'
  // reservations cannot be reclaimed, and a cache wiped for a turn that is refused anyway
  // helps no one.
  int64_t idle_total = 0;
  for (const auto& [session, blocks] : idle_blocks_) idle_total += blocks;
  const int64_t running_reserved = reserved_blocks_ - idle_total;
  while (running_reserved + need <= pool_blocks &&
         reserved_blocks_ - own_blocks() + need > pool_blocks) {
    // The prefix cache's sessions go first: they only save prompt work.
    if (DropPrefixEntry()) {
      DrainGraveyard();
      continue;
    }
    std::shared_ptr<LiveSession> victim = evict_idle_ ? evict_idle_() : nullptr;
    if (victim == nullptr) break;
    victim.reset();  // the last reference: its engine session retires
    DrainGraveyard();
  }
  if (reserved_blocks_ - own_blocks() + need > pool_blocks) {
    rejected_turns_.fetch_add(1);
    job->stream.End(Busy(need));
    return;
  }
  reserved_blocks_ += need - own_blocks();
  if (own != nullptr) idle_blocks_.erase(own);
  Running r;
  job->admitted.store(true);
  r.job = std::move(job);
  r.reserved_blocks = need;
  r.job->queue_ms = MsSince(r.job->submitted_at);
  running_.push_back(std::move(r));
}

int32_t Scheduler::PickToken(Running& r, engine::TokenLogprobs* logprobs) {
  const std::span<const float> logits = r.job->live->engine_session->Logits();
  std::span<const float> pick_from = logits;
  if (r.constraint.has_value()) {
    const auto t0 = TurnJob::Clock::now();
    absl::Status s = r.constraint->Mask(logits, &r.masked_logits);
    structured_mask_ns_.fetch_add(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(TurnJob::Clock::now() - t0).count()));
    if (!s.ok()) {
      r.pick_error = std::move(s);
      return -1;
    }
    structured_tokens_.fetch_add(1);
    pick_from = r.masked_logits;
  }
  const int32_t token = r.sampler->Sample(pick_from);
  if (r.job->sampling.top_logprobs >= 0) {
    engine::ComputeLogprobs(logits, token, r.job->sampling.top_logprobs, logprobs);
  }
  return token;
}

void Scheduler::SampleAndEmit(Running& r) {
  engine::TokenLogprobs logprobs;
  const int32_t token = PickToken(r, &logprobs);
  Emit(r, token, logprobs);
}

void Scheduler::PickTokens() {
  picked_.resize(pick_rows_.size());
  picked_logprobs_.resize(pick_rows_.size());
  // Each row's sampler and logits are its own, and Sample keeps its scratch per thread:
  // the rows' picks run side by side on the backend's threads (one thread took 16 x a
  // pick per step, docs/engine.md "Sampling").
  engine_->backend().ParallelForHost(
      static_cast<int64_t>(pick_rows_.size()), [this](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          picked_[k] = PickToken(running_[pick_rows_[k]], &picked_logprobs_[k]);
        }
      });
}

void Scheduler::Emit(Running& r, int32_t token, const engine::TokenLogprobs& logprobs) {
  if (token < 0) return Fail(r, std::move(r.pick_error));  // PickToken found no token
  TurnJob& job = *r.job;
  ++job.generated_tokens;
  if (job.generated_tokens == 1) job.ttft_ms = MsSince(job.submitted_at);
  if (options_.prefix_cache_entries > 0 && job.live->session_id.empty()) r.emitted.push_back(token);
  if (job.sampling.top_logprobs >= 0) {
    job.stream.PushToken(token, &logprobs);
  } else {
    job.stream.PushToken(token);
  }
  r.pending_token = token;
  r.phase = Phase::kDecode;
  if (r.constraint.has_value()) r.constraint->Accept(token);  // a stop id moves nothing
  if (r.sampler->IsStop(token, engine_->config().eos_token_ids) ||
      (r.constraint.has_value() && r.constraint->Finished())) {
    job.finish_reason = FinishReason::kStop;
    r.stop_after_feed = true;
  } else if (static_cast<int>(job.generated_tokens) >= job.sampling.max_new_tokens) {
    job.finish_reason = FinishReason::kLength;
    r.stop_after_feed = true;
  }
}

void Scheduler::DecodeStep() {
  batch_sessions_.clear();
  batch_ids_.clear();
  batch_index_.clear();
  for (size_t i = 0; i < running_.size(); ++i) {
    Running& r = running_[i];
    if (r.phase != Phase::kDecode) continue;
    batch_sessions_.push_back(r.job->live->engine_session.get());
    batch_ids_.push_back(r.pending_token);
    batch_index_.push_back(i);
  }
  if (batch_index_.empty()) return;
  const auto t0 = TurnJob::Clock::now();
  absl::Status batch_status;
  const bool batched = options_.batching && batch_index_.size() > 1;
  if (batched) {
    batch_status = engine::AppendBatch(*engine_, batch_sessions_, batch_ids_, &forward_scratch_);
  }
  const double batch_ms = MsSince(t0);
  decode_steps_.fetch_add(1);
  decoded_tokens_.fetch_add(batch_index_.size());
  pick_rows_.clear();
  for (size_t b = 0; b < batch_index_.size(); ++b) {
    Running& r = running_[batch_index_[b]];
    absl::Status s = batch_status;
    if (!batched) {
      const auto t1 = TurnJob::Clock::now();
      s = batch_sessions_[b]->Append(batch_ids_[b]);
      r.job->decode_ms += MsSince(t1);
    } else {
      r.job->decode_ms += batch_ms;
    }
    if (!s.ok()) {
      Fail(r, s);
      continue;
    }
    r.pending_token = -1;
    if (r.stop_after_feed) {
      Complete(r);
    } else {
      pick_rows_.push_back(batch_index_[b]);
    }
  }
  PickTokens();
  for (size_t k = 0; k < pick_rows_.size(); ++k) {
    Emit(running_[pick_rows_[k]], picked_[k], picked_logprobs_[k]);
  }
  // Smoothed: one slow step (a page fault, another process) does not shrink the next
  // prompt chunks to nothing.
  const double step_ms = MsSince(t0);
  decode_step_ms_ = decode_step_ms_ <= 0 ? step_ms : 0.7 * decode_step_ms_ + 0.3 * step_ms;
  if (options_.prefill_stall > 0) {
    // Credit never banks more than one step's budget: no burst after a quiet spell.
    prefill_credit_ms_ = std::min(prefill_credit_ms_ + options_.prefill_stall * step_ms,
                                  options_.prefill_stall * decode_step_ms_);
  }
}

void Scheduler::Fail(Running& r, absl::Status status) {
  // A feeder that fails leaves its share to the next member that asks.
  if (r.job->share != nullptr && r.job->share->feeder == r.job.get()) {
    r.job->share->feeder = nullptr;
  }
  // The derived state no longer equals any stored version: drop it, the next turn
  // restores from the store.
  r.job->live->engine_session.reset();
  reserved_blocks_ -= r.reserved_blocks;
  r.reserved_blocks = 0;
  r.phase = Phase::kFinish;
  r.job->stream.End(std::move(status));
}

void Scheduler::Complete(Running& r) {
  TurnJob& job = *r.job;
  LiveSession& live = *job.live;
  engine::Session& session = *live.engine_session;
  auto state = session.ExportState();
  if (!state.ok()) return Fail(r, state.status());
  job.final_state = std::move(*state);
  job.tokens_folded_in_turn = job.final_state.tokens_folded - r.folded_at_start;
  job.fold_ms = 1000.0 * (FoldSeconds(&session) - r.fold_seconds_at_start);
  job.final_rng_state = r.sampler->rng().state();
  live.rng_state = job.final_rng_state;
  live.total_tokens.store(session.TotalTokens());
  live.last_token.store(job.final_state.window_token_ids.empty()
                            ? -1
                            : job.final_state.window_token_ids.back());
  live.tokens_folded.store(job.final_state.tokens_folded);
  live.resident_tokens.store(session.ResidentTokens());
  live.kv_bytes_resident.store(session.KvBytesResident());
  // The session stays (idle) until it is evicted or replaced: count what it holds now.
  const int held = std::min(r.reserved_blocks, HeldBlocks(geometry_, session.ResidentTokens()));
  reserved_blocks_ += held - r.reserved_blocks;
  idle_blocks_[&session] = held;
  r.reserved_blocks = 0;
  r.phase = Phase::kFinish;
  KeepPrefix(r);
  job.stream.End(absl::OkStatus());
}

void Scheduler::KeepPrefix(Running& r) {
  TurnJob& job = *r.job;
  LiveSession& live = *job.live;
  if (options_.prefix_cache_entries <= 0 || !live.session_id.empty() ||
      live.engine_session == nullptr) {
    return;
  }
  std::vector<int32_t> ids = job.prompt_ids;
  ids.insert(ids.end(), r.emitted.begin(), r.emitted.end());
  // An ephemeral session fed its prompt and every token it emitted, nothing else.
  if (static_cast<int64_t>(ids.size()) != live.engine_session->TotalTokens()) return;
  // The choices of one prompt share keep one entry, the first to end: the others would
  // hold the same prompt's KV again and push other conversations' entries out (a
  // continuation of another choice still shares the prompt with it in full mode).
  if (job.choices != nullptr && job.choices->members > 1) {
    if (job.choices->kept) return;
    job.choices->kept = true;
  }
  // An entry whose ids these extend holds nothing more: this one replaces it.
  std::erase_if(prefix_cache_, [&](const PrefixEntry& e) {
    return e.scope == job.cache_scope && e.spec == live.spec && e.ids.size() <= ids.size() &&
           std::equal(e.ids.begin(), e.ids.end(), ids.begin());
  });
  while (prefix_cache_.size() >= static_cast<size_t>(options_.prefix_cache_entries)) {
    DropPrefixEntry();
  }
  prefix_cache_.push_back(PrefixEntry{std::move(live.engine_session), job.cache_scope, live.spec,
                                      std::move(ids), ++prefix_clock_});
}

bool Scheduler::DropPrefixEntry() {
  if (prefix_cache_.empty()) return false;
  auto oldest = std::min_element(
      prefix_cache_.begin(), prefix_cache_.end(),
      [](const PrefixEntry& a, const PrefixEntry& b) { return a.last_used < b.last_used; });
  prefix_cache_.erase(oldest);  // its session retires: its blocks free in DrainGraveyard
  return true;
}

void Scheduler::RefreshStats() {
  const engine::BlockPool& pool = engine_->pool();
  kv_used_bytes_.store(static_cast<uint64_t>(pool.num_blocks() - pool.free_blocks()) *
                       pool.bytes_per_block());
  kv_reserved_bytes_.store(static_cast<uint64_t>(std::max<int64_t>(0, reserved_blocks_)) *
                           pool.bytes_per_block());
}

}  // namespace kvfold::runtime
