// The scheduler's prompt work (steps 3 and 4 in scheduler.h): starting turns, short
// prompts whole, long ones in pieces under the credit the decode steps earn (or fixed
// chunks with prefill_stall 0).
#include <algorithm>
#include <limits>
#include <utility>

#include "inference_svc/runtime/scheduler.h"

namespace kvfold::runtime {
namespace {

// Largest prompt run whole while the cost of prompt work is not known yet (and the chunk
// of the unbounded mode's first contended prompt).
constexpr size_t kProbeChunkTokens = 16;
// A prompt whose rest costs at most this many decode steps (or the step's budget, if
// more) runs whole at once, even into debt: a short turn's prompt, about what its own
// decode steps cost, never queues behind a long prompt.
constexpr double kShortPromptDecodeSteps = 8;
// The shortest prefix worth taking from the prefix cache (a BOS alone is not).
constexpr size_t kMinPrefixTokens = 16;

}  // namespace

size_t Scheduler::ChunkTokens(const Running& r, size_t remaining, bool contended) const {
  const size_t most =
      std::min(remaining, static_cast<size_t>(std::max(1, options_.prefill_chunk_tokens)));
  return contended && !prefill_cost_.ready() && r.last_ms_per_token <= 0
             ? std::min(most, kProbeChunkTokens)
             : most;
}

bool Scheduler::RunsWhole(const Running& r, size_t remaining, double step_budget_ms) const {
  if (remaining > static_cast<size_t>(std::max(1, options_.prefill_chunk_tokens))) return false;
  if (!prefill_cost_.ready() && r.last_ms_per_token <= 0) {
    return remaining <= kProbeChunkTokens;  // cost unknown: only a short prompt
  }
  const double short_ms = std::max(step_budget_ms, kShortPromptDecodeSteps * decode_step_ms_);
  if (!prefill_cost_.ready()) return static_cast<double>(remaining) * r.last_ms_per_token <= short_ms;
  const int64_t resident = r.job->live->engine_session->ResidentTokens();
  const int64_t n = static_cast<int64_t>(remaining);
  return prefill_cost_.TokensWithin(resident, short_ms, n) >= n;
}

void Scheduler::StartTurn(Running& r) {
  TurnJob& job = *r.job;
  LiveSession& live = *job.live;
  const auto t0 = TurnJob::Clock::now();
  if (live.engine_session == nullptr) {
    auto created = factory_(live.spec);
    if (!created.ok()) return Fail(r, created.status());
    live.engine_session = EngineSessionPtr(created->release(), Deleter());
    if (job.restore_state.has_value()) {
      engine::SessionState& state = *job.restore_state;
      const bool replay = state.mode == engine::KvMode::kFull && state.sink_token_ids.empty() &&
                          state.total_tokens ==
                              static_cast<int64_t>(state.window_token_ids.size());
      if (replay) {
        // Full mode holds every id: importing is prefilling them, which a long history
        // must not do in one call on this thread (chunked by PromptStep instead).
        r.replay_ids = std::move(state.window_token_ids);
      } else if (absl::Status s = live.engine_session->ImportState(state); !s.ok()) {
        return Fail(r, s);
      }
    }
  }
  r.folded_at_start = job.restore_state.has_value() ? job.restore_state->tokens_folded
                                                    : live.tokens_folded.load();
  r.fold_seconds_at_start = FoldSeconds(live.engine_session.get());
  r.sampler.emplace(engine_->config().vocab_size, job.sampling, engine_->config().eos_token_ids);
  r.sampler->AddContext(job.prompt_ids);
  if (job.grammar != nullptr) {
    std::vector<int32_t> stops = job.sampling.stop_token_ids;
    if (!job.sampling.ignore_eos) {
      for (int id : engine_->config().eos_token_ids) stops.push_back(id);
    }
    r.constraint.emplace(job.grammar, job.token_table, std::move(stops));
  }
  if (job.reseed.has_value()) {
    r.sampler->rng() = engine::Rng(*job.reseed);
  } else {
    r.sampler->rng().set_state(live.rng_state);
  }
  job.restore_ms += MsSince(t0);
  r.phase = Phase::kPrefill;
}

std::span<const int32_t> Scheduler::PromptRest(const Running& r) {
  if (r.replay_pos < r.replay_ids.size()) {
    return std::span<const int32_t>(r.replay_ids).subspan(r.replay_pos);
  }
  return std::span<const int32_t>(r.job->prompt_ids).subspan(r.prompt_pos);
}

void Scheduler::Advance(Running& r, size_t tokens) {
  (r.replay_pos < r.replay_ids.size() ? r.replay_pos : r.prompt_pos) += tokens;
  if (r.replay_pos == r.replay_ids.size() && !r.replay_ids.empty()) {
    r.replay_ids = std::vector<int32_t>();  // done: free the copy
    r.replay_pos = 0;
  }
}

bool Scheduler::ScoresRest(const Running& r) {
  return r.replay_pos >= r.replay_ids.size() && r.job->prompt_top_logprobs >= 0;
}

void Scheduler::ObservePrompt(Running& r) {
  TurnJob& job = *r.job;
  engine::Session& session = *job.live->engine_session;
  if (!ScoresRest(r)) return session.ObservePrefillRows(nullptr);
  const int top = job.prompt_top_logprobs;
  if (r.prompt_pos == 0 && !session.Logits().empty()) {
    // The first prompt token follows the session's last token.
    engine::ComputeLogprobs(session.Logits(), job.prompt_ids[0], top,
                            &job.prompt_logprobs.emplace_back());
  }
  // Row k of the prompt holds the logits before prompt token k + 1.
  session.ObservePrefillRows([&job, top](std::span<const float> logits) {
    const size_t next = ++job.prompt_rows_seen;
    if (next < job.prompt_ids.size()) {
      engine::ComputeLogprobs(logits, job.prompt_ids[next], top,
                              &job.prompt_logprobs.emplace_back());
    }
  });
}

void Scheduler::PrefillChunk(Running& r, size_t take) {
  TurnJob& job = *r.job;
  engine::Session& session = *job.live->engine_session;
  const bool replay = r.replay_pos < r.replay_ids.size();
  const bool scored = ScoresRest(r);
  const int64_t resident = session.ResidentTokens();
  ObservePrompt(r);
  const auto t0 = TurnJob::Clock::now();
  absl::Status s = session.Prefill(PromptRest(r).first(take));
  const double ms = MsSince(t0);
  (replay ? job.restore_ms : job.prefill_ms) += ms;
  if (options_.prefill_stall > 0) prefill_credit_ms_ -= ms;
  if (!s.ok()) return Fail(r, s);
  // A scored prompt (every row's logits) would overstate the cost of prompt work.
  if (!scored) prefill_cost_.Observe(resident, static_cast<int64_t>(take), ms);
  r.last_ms_per_token = ms / static_cast<double>(take);
  Advance(r, take);
}

void Scheduler::StartPieces(Running& r, size_t tokens) {
  engine::Session& session = *r.job->live->engine_session;
  r.pieces_resident = session.ResidentTokens();
  ObservePrompt(r);
  if (absl::Status s = session.StartPrefill(PromptRest(r).first(tokens)); !s.ok()) {
    return Fail(r, s);
  }
  r.in_pieces = true;
  r.pieces_tokens = tokens;
  r.pieces_ms = 0;
}

bool Scheduler::ContinuePieces(Running& r) {
  if (!r.in_pieces || prefill_credit_ms_ <= 0) return false;
  TurnJob& job = *r.job;
  const bool replay = r.replay_pos < r.replay_ids.size();
  const auto t0 = TurnJob::Clock::now();
  absl::StatusOr<bool> done = job.live->engine_session->ContinuePrefill(prefill_credit_ms_);
  const double ms = MsSince(t0);
  (replay ? job.restore_ms : job.prefill_ms) += ms;
  prefill_credit_ms_ -= ms;
  r.pieces_ms += ms;
  if (!done.ok()) {
    Fail(r, done.status());
    return false;
  }
  if (!*done) return false;
  r.in_pieces = false;
  if (!ScoresRest(r)) {
    prefill_cost_.Observe(r.pieces_resident, static_cast<int64_t>(r.pieces_tokens), r.pieces_ms);
  }
  r.last_ms_per_token = r.pieces_ms / static_cast<double>(r.pieces_tokens);
  Advance(r, r.pieces_tokens);
  return true;
}

void Scheduler::PromptStep() {
  for (Running& r : running_) {
    if (r.phase == Phase::kStart) StartTurn(r);
  }
  prefill_order_.clear();
  bool decoding = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i].phase == Phase::kPrefill && !WaitsForShare(running_[i])) {
      prefill_order_.push_back(i);
    }
    decoding = decoding || running_[i].phase == Phase::kDecode;
  }
  if (prefill_order_.empty()) return;
  auto remaining = [&](size_t i) {
    const Running& r = running_[i];
    return (r.replay_ids.size() - r.replay_pos) + (r.job->prompt_ids.size() - r.prompt_pos);
  };
  std::stable_sort(prefill_order_.begin(), prefill_order_.end(),
                   [&](size_t x, size_t y) { return remaining(x) < remaining(y); });
  const bool bounded = options_.prefill_stall > 0 && decode_step_ms_ > 0;
  const double step_budget_ms = bounded ? options_.prefill_stall * decode_step_ms_
                                        : std::numeric_limits<double>::infinity();
  // Nobody decodes: no earlier prompt work is owed to anyone; this step gets its budget.
  if (!decoding) prefill_credit_ms_ = bounded ? step_budget_ms : 0;
  const bool contended = decoding || prefill_order_.size() > 1;
  for (size_t i : prefill_order_) {
    Running& r = running_[i];
    if (!r.prefix_checked) ReusePrefix(r);
    // A chunk never crosses from the replayed history into the prompt.
    while (r.phase == Phase::kPrefill) {
      if (r.in_pieces) {
        if (!ContinuePieces(r)) break;
        continue;
      }
      const size_t left = PromptRest(r).size();
      if (left == 0) {
        EndPrompt(r);
        break;
      }
      if (bounded) {
        if (RunsWhole(r, left, step_budget_ms)) {
          PrefillChunk(r, left);
        } else if (prefill_credit_ms_ > 0) {
          // A long rest: in pieces, so no unit of it outlasts the credit by more than
          // one piece, however long its context.
          StartPieces(r, left);
        } else {
          break;  // wait for the decode steps to earn prompt time
        }
        continue;
      }
      const size_t take = ChunkTokens(r, left, contended);
      PrefillChunk(r, take);
      if (take < left) break;  // one chunk per turn and step
    }
  }
  CopySharedPrompts();
}

void Scheduler::ReusePrefix(Running& r) {
  r.prefix_checked = true;
  TurnJob& job = *r.job;
  engine::Session& session = *job.live->engine_session;
  const std::vector<int32_t>& prompt = job.prompt_ids;
  // A scored prompt needs every row's logits, so it feeds every token.
  if (prefix_cache_.empty() || !job.live->session_id.empty() || !r.replay_ids.empty() ||
      r.prompt_pos != 0 || job.prompt_top_logprobs >= 0 || session.TotalTokens() != 0 ||
      prompt.size() < 2) {
    return;
  }
  // Prefixes of entries: full mode; sliding and sink modes while the entry has evicted
  // nothing (the copy refuses otherwise, and the next candidate is tried).
  const core::KvMode mode = job.live->spec.mode;
  const bool prefixes =
      mode == core::KvMode::kFull || mode == core::KvMode::kSliding || mode == core::KvMode::kSink;
  const size_t sinks =
      mode == core::KvMode::kSink ? static_cast<size_t>(job.live->spec.sink_tokens) : 0;
  const size_t block = static_cast<size_t>(engine_->pool().block_size());
  const bool int8 = engine_->pool().dtype() == core::DType::kI8;
  std::vector<std::pair<size_t, PrefixEntry*>> candidates;  // (usable tokens, entry)
  for (PrefixEntry& entry : prefix_cache_) {
    if (entry.scope != job.cache_scope || !(entry.spec == job.live->spec)) continue;
    const size_t most = std::min(entry.ids.size(), prompt.size());
    const size_t common = static_cast<size_t>(
        std::mismatch(entry.ids.begin(), entry.ids.begin() + most, prompt.begin()).first -
        entry.ids.begin());
    size_t usable = 0;
    if (common == entry.ids.size() && common < prompt.size()) {
      usable = common;  // all the entry fed, in any mode
    } else if (prefixes) {
      // A prefix of it, leaving at least one prompt token to feed (for the logits).
      usable = std::min(common, prompt.size() - 1);
      if (int8 && usable > sinks) usable -= (usable - sinks) % block;
    }
    if (usable >= kMinPrefixTokens) candidates.emplace_back(usable, &entry);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  PrefixEntry* best = nullptr;
  size_t best_tokens = 0;
  const auto t0 = TurnJob::Clock::now();
  for (const auto& [usable, entry] : candidates) {
    // A refused copy leaves the session fresh.
    if (session.CopyPrefixFrom(*entry->session, static_cast<int64_t>(usable)).ok()) {
      best = entry;
      best_tokens = usable;
      break;
    }
  }
  job.prefill_ms += MsSince(t0);
  if (best == nullptr) return;  // it feeds the whole prompt
  best->last_used = ++prefix_clock_;
  r.prompt_pos = best_tokens;
  job.cached_prompt_tokens = static_cast<uint32_t>(best_tokens);
  prefix_cache_hits_.fetch_add(1);
  prefix_cache_tokens_.fetch_add(best_tokens);
}

bool Scheduler::WaitsForShare(const Running& r) const {
  PromptShare* share = r.job->share.get();
  if (share == nullptr) return false;
  if (share->feeder == nullptr) {
    const bool slots_left =
        running_.size() < static_cast<size_t>(std::max(1, options_.max_active_sessions));
    if (share->settled < share->members && slots_left) return true;
    share->feeder = r.job.get();
  }
  return share->feeder != r.job.get();
}

void Scheduler::CopySharedPrompts() {
  if (shares_fed_.empty()) return;
  for (Running& r : running_) {
    const PromptShare* share = r.job->share.get();
    if (r.phase == Phase::kPrefill && share != nullptr && share->fed != nullptr &&
        share->fed_job != r.job.get()) {
      CopyPrompt(r);
    }
  }
  for (const std::shared_ptr<PromptShare>& share : shares_fed_) {
    share->feeder = nullptr;
    share->fed = nullptr;
    share->fed_job = nullptr;
    share->prompt_logprobs.clear();
  }
  shares_fed_.clear();
}

void Scheduler::CopyPrompt(Running& r) {
  TurnJob& job = *r.job;
  const std::shared_ptr<PromptShare> share = std::move(job.share);  // done with it either way
  const TurnJob& from = *share->fed_job;
  if (job.prompt_ids != from.prompt_ids || job.prompt_top_logprobs != from.prompt_top_logprobs ||
      !(job.live->spec == from.live->spec) || !r.replay_ids.empty()) {
    return;  // not the same prompt on the same kind of session: it feeds its own
  }
  const auto t0 = TurnJob::Clock::now();
  absl::Status s = job.live->engine_session->CopyFrom(*share->fed);
  job.prefill_ms += MsSince(t0);
  if (!s.ok()) return Fail(r, s);
  prompt_copies_.fetch_add(1);
  r.prompt_pos = job.prompt_ids.size();
  if (job.prompt_top_logprobs >= 0) job.prompt_logprobs = share->prompt_logprobs;
  EndPrompt(r);
}

void Scheduler::EndPrompt(Running& r) {
  TurnJob& job = *r.job;
  job.live->engine_session->ObservePrefillRows(nullptr);
  if (job.share != nullptr && job.share->feeder == &job) {
    // The members waiting for this prompt copy it at the end of this step, before any
    // decode step changes this session.
    PromptShare& share = *job.share;
    share.fed = job.live->engine_session.get();
    share.fed_job = &job;
    if (job.prompt_top_logprobs >= 0) share.prompt_logprobs = job.prompt_logprobs;
    shares_fed_.push_back(std::move(job.share));
  }
  if (job.prompt_top_logprobs >= 0) job.stream.SetPromptLogprobs(std::move(job.prompt_logprobs));
  if (job.sampling.max_new_tokens <= 0) {
    job.finish_reason = FinishReason::kLength;
    return Complete(r);
  }
  if (job.live->engine_session->Logits().empty()) {
    return Fail(r, absl::FailedPreconditionError(
                       "the session has no tokens yet: send a prompt first"));
  }
  SampleAndEmit(r);
}

}  // namespace kvfold::runtime
