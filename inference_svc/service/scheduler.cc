#include "inference_svc/service/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference_svc/memory/memory_session.h"

namespace kvfold::service {
namespace {

double MsSince(Turn::Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Turn::Clock::now() - t).count();
}

double FoldSeconds(const engine::Session* session) {
  const auto* memory_session = dynamic_cast<const memory::MemorySession*>(session);
  return memory_session != nullptr ? memory_session->stats().fold_seconds : 0.0;
}

}  // namespace

void TurnEvents::Push(TurnEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

bool TurnEvents::PopAll(std::chrono::milliseconds timeout, std::vector<TurnEvent>* out) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

Scheduler::Scheduler(engine::Engine* engine, SessionFactory factory,
                     const SchedulerOptions& options)
    : engine_(engine),
      factory_(std::move(factory)),
      options_(options),
      kv_pool_bytes_(static_cast<uint64_t>(engine->pool().num_blocks()) *
                     engine->pool().bytes_per_block()) {
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Submit(std::shared_ptr<Turn> turn) {
  turn->submitted_at = Turn::Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(turn));
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

void Scheduler::Loop() {
  std::vector<engine::Session*> dead;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !queue_.empty() || !running_.empty() || !graveyard_.empty();
      });
      if (stop_ && queue_.empty() && running_.empty() && graveyard_.empty()) break;
      while (!queue_.empty() && running_.size() < static_cast<size_t>(options_.max_active_sessions)) {
        Running r;
        r.turn = std::move(queue_.front());
        queue_.pop_front();
        r.started = Turn::Clock::now();
        r.turn->queue_ms = MsSince(r.turn->submitted_at);
        running_.push_back(std::move(r));
      }
      dead.swap(graveyard_);
    }
    for (engine::Session* s : dead) delete s;
    dead.clear();

    for (Running& r : running_) {
      if (r.phase != Phase::kFinish && r.turn->cancelled.load()) {
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
}

void Scheduler::PromptStep() {
  const size_t n = running_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (prompt_cursor_ + k) % n;
    Running& r = running_[i];
    if (r.phase != Phase::kStart && r.phase != Phase::kPrefill) continue;
    prompt_cursor_ = i + 1;
    Turn& turn = *r.turn;
    LiveSession& live = *turn.live;
    if (r.phase == Phase::kStart) {
      const auto t0 = Turn::Clock::now();
      if (live.engine_session == nullptr) {
        auto created = factory_(live.config);
        if (!created.ok()) return Fail(r, created.status());
        live.engine_session = EngineSessionPtr(created->release(), Deleter());
        if (turn.restore_state.has_value()) {
          if (absl::Status s = live.engine_session->ImportState(*turn.restore_state); !s.ok()) {
            return Fail(r, s);
          }
        }
      }
      r.folded_at_start = turn.restore_state.has_value() ? turn.restore_state->tokens_folded
                                                         : live.tokens_folded.load();
      r.fold_seconds_at_start = FoldSeconds(live.engine_session.get());
      r.sampler.emplace(engine_->config().vocab_size, turn.sampling);
      if (turn.reseed.has_value()) {
        r.sampler->rng() = engine::Rng(*turn.reseed);
      } else {
        r.sampler->rng().set_state(live.rng_state);
      }
      turn.restore_ms += MsSince(t0);
      r.phase = Phase::kPrefill;
      if (!turn.prompt_ids.empty()) return;  // one unit of work per step
    }
    // kPrefill
    if (r.prompt_pos < turn.prompt_ids.size()) {
      const auto t0 = Turn::Clock::now();
      const size_t take = std::min(turn.prompt_ids.size() - r.prompt_pos,
                                   static_cast<size_t>(options_.prefill_chunk_tokens));
      absl::Status s = live.engine_session->Prefill(
          std::span<const int32_t>(turn.prompt_ids.data() + r.prompt_pos, take));
      turn.prefill_ms += MsSince(t0);
      if (!s.ok()) return Fail(r, s);
      r.prompt_pos += take;
      if (r.prompt_pos < turn.prompt_ids.size()) return;
    }
    if (turn.sampling.max_new_tokens <= 0) {
      turn.finish_reason = v1::FINISH_REASON_LENGTH;
      return Complete(r);
    }
    if (live.engine_session->Logits().empty()) {
      return Fail(r, absl::FailedPreconditionError(
                         "the session has no tokens yet: send a prompt first"));
    }
    SampleAndEmit(r);
    return;
  }
}

void Scheduler::SampleAndEmit(Running& r) {
  Turn& turn = *r.turn;
  engine::Session& session = *turn.live->engine_session;
  const int32_t token = r.sampler->Sample(session.Logits());
  ++turn.generated_tokens;
  if (turn.generated_tokens == 1) turn.ttft_ms = MsSince(turn.submitted_at);
  TurnEvent event;
  event.token_ids.push_back(token);
  turn.events.Push(std::move(event));
  r.pending_token = token;
  r.phase = Phase::kDecode;
  if (r.sampler->IsStop(token, engine_->config().eos_token_ids)) {
    turn.finish_reason = v1::FINISH_REASON_STOP;
    r.stop_after_feed = true;
  } else if (static_cast<int>(turn.generated_tokens) >= turn.sampling.max_new_tokens) {
    turn.finish_reason = v1::FINISH_REASON_LENGTH;
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
    batch_sessions_.push_back(r.turn->live->engine_session.get());
    batch_ids_.push_back(r.pending_token);
    batch_index_.push_back(i);
  }
  if (batch_index_.empty()) return;
  const auto t0 = Turn::Clock::now();
  absl::Status batch_status;
  if (options_.batching && batch_index_.size() > 1) {
    batch_status = engine::AppendBatch(*engine_, batch_sessions_, batch_ids_, &forward_scratch_);
  }
  const double batch_ms = MsSince(t0);
  decode_steps_.fetch_add(1);
  decoded_tokens_.fetch_add(batch_index_.size());
  for (size_t b = 0; b < batch_index_.size(); ++b) {
    Running& r = running_[batch_index_[b]];
    absl::Status s = batch_status;
    if (!options_.batching || batch_index_.size() == 1) {
      const auto t1 = Turn::Clock::now();
      s = batch_sessions_[b]->Append(batch_ids_[b]);
      r.turn->decode_ms += MsSince(t1);
    } else {
      r.turn->decode_ms += batch_ms;
    }
    if (!s.ok()) {
      Fail(r, s);
      continue;
    }
    r.pending_token = -1;
    if (r.stop_after_feed) {
      Complete(r);
    } else {
      SampleAndEmit(r);
    }
  }
}

void Scheduler::Fail(Running& r, absl::Status status) {
  // The derived state no longer equals any stored version: drop it, the next turn
  // restores from the store.
  r.turn->live->engine_session.reset();
  TurnEvent event;
  event.kind = TurnEvent::Kind::kError;
  event.status = std::move(status);
  r.phase = Phase::kFinish;
  r.turn->events.Push(std::move(event));
}

void Scheduler::Complete(Running& r) {
  Turn& turn = *r.turn;
  LiveSession& live = *turn.live;
  engine::Session& session = *live.engine_session;
  auto state = session.ExportState();
  if (!state.ok()) return Fail(r, state.status());
  turn.final_state = std::move(*state);
  turn.tokens_folded_in_turn = turn.final_state.tokens_folded - r.folded_at_start;
  turn.fold_ms = 1000.0 * (FoldSeconds(&session) - r.fold_seconds_at_start);
  if (r.sampler.has_value()) {
    turn.final_rng_state = r.sampler->rng().state();
    live.rng_state = turn.final_rng_state;
  } else {
    turn.final_rng_state = live.rng_state;
  }
  live.total_tokens.store(session.TotalTokens());
  live.tokens_folded.store(turn.final_state.tokens_folded);
  live.resident_tokens.store(session.ResidentTokens());
  live.kv_bytes_resident.store(session.KvBytesResident());
  r.phase = Phase::kFinish;
  TurnEvent event;
  event.kind = TurnEvent::Kind::kDone;
  turn.events.Push(std::move(event));
}

void Scheduler::RefreshStats() {
  const engine::BlockPool& pool = engine_->pool();
  kv_used_bytes_.store(static_cast<uint64_t>(pool.num_blocks() - pool.free_blocks()) *
                       pool.bytes_per_block());
}

}  // namespace kvfold::service
