// The scheduler's prompt work (steps 3 and 4 in scheduler.h): starting turns, and prompt
// chunks under the step's time budget.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "inference_svc/runtime/scheduler.h"

namespace kvfold::runtime {
namespace {

// Prompt chunk while the cost of prompt work is not known yet.
constexpr size_t kProbeChunkTokens = 16;
// A prompt whose rest costs at most this many decode steps (or the step's budget, if
// more) runs whole at once, even into debt: a short turn's prompt, about what its own
// decode steps cost, never queues behind a long prompt.
constexpr double kShortPromptDecodeSteps = 8;

}  // namespace

size_t Scheduler::ChunkTokens(const Running& r, size_t remaining, double step_budget_ms,
                              bool contended) const {
  const size_t max_chunk = static_cast<size_t>(std::max(1, options_.prefill_chunk_tokens));
  const size_t most = std::min(remaining, max_chunk);
  if (options_.prefill_stall <= 0 || !std::isfinite(step_budget_ms)) {
    // Fixed chunks, or no decode step measured yet: nothing to size against.
    return contended && !prefill_cost_.ready() && r.last_ms_per_token <= 0
               ? std::min(most, kProbeChunkTokens)
               : most;
  }
  const int64_t resident = r.job->live->engine_session->ResidentTokens();
  if (!prefill_cost_.ready() && r.last_ms_per_token <= 0) {
    // Cost unknown: a small probe (a short prompt whole).
    return std::min(most, kProbeChunkTokens);
  }
  auto fits = [&](double budget_ms) -> size_t {
    if (!prefill_cost_.ready()) {
      return static_cast<size_t>(std::clamp<double>(budget_ms / r.last_ms_per_token, 0,
                                                    static_cast<double>(most)));
    }
    return static_cast<size_t>(
        prefill_cost_.TokensWithin(resident, budget_ms, static_cast<int64_t>(most)));
  };
  const double short_ms = std::max(step_budget_ms, kShortPromptDecodeSteps * decode_step_ms_);
  if (remaining <= max_chunk && fits(short_ms) >= remaining) return remaining;
  // A long prompt spends the credit the decode steps have earned.
  if (prefill_credit_ms_ <= 0) return 0;
  const size_t min_chunk =
      std::min(static_cast<size_t>(std::max(1, options_.min_prefill_chunk_tokens)), most);
  return std::max(fits(prefill_credit_ms_), min_chunk);
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
  r.sampler.emplace(engine_->config().vocab_size, job.sampling);
  if (job.reseed.has_value()) {
    r.sampler->rng() = engine::Rng(*job.reseed);
  } else {
    r.sampler->rng().set_state(live.rng_state);
  }
  job.restore_ms += MsSince(t0);
  r.phase = Phase::kPrefill;
}

void Scheduler::PrefillChunk(Running& r, size_t take) {
  TurnJob& job = *r.job;
  engine::Session& session = *job.live->engine_session;
  const bool replay = r.replay_pos < r.replay_ids.size();
  const int32_t* ids = replay ? r.replay_ids.data() + r.replay_pos
                              : job.prompt_ids.data() + r.prompt_pos;
  const int64_t resident = session.ResidentTokens();
  const auto t0 = TurnJob::Clock::now();
  absl::Status s = session.Prefill(std::span<const int32_t>(ids, take));
  const double ms = MsSince(t0);
  (replay ? job.restore_ms : job.prefill_ms) += ms;
  if (options_.prefill_stall > 0) prefill_credit_ms_ -= ms;
  if (!s.ok()) return Fail(r, s);
  prefill_cost_.Observe(resident, static_cast<int64_t>(take), ms);
  r.last_ms_per_token = ms / static_cast<double>(take);
  (replay ? r.replay_pos : r.prompt_pos) += take;
  if (r.replay_pos == r.replay_ids.size() && !r.replay_ids.empty()) {
    r.replay_ids = std::vector<int32_t>();  // done: free the copy
    r.replay_pos = 0;
  }
}

void Scheduler::StartPieces(Running& r, size_t tokens) {
  TurnJob& job = *r.job;
  engine::Session& session = *job.live->engine_session;
  const bool replay = r.replay_pos < r.replay_ids.size();
  const int32_t* ids = replay ? r.replay_ids.data() + r.replay_pos
                              : job.prompt_ids.data() + r.prompt_pos;
  r.pieces_resident = session.ResidentTokens();
  if (absl::Status s = session.StartPrefill(std::span<const int32_t>(ids, tokens)); !s.ok()) {
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
  prefill_cost_.Observe(r.pieces_resident, static_cast<int64_t>(r.pieces_tokens), r.pieces_ms);
  r.last_ms_per_token = r.pieces_ms / static_cast<double>(r.pieces_tokens);
  (replay ? r.replay_pos : r.prompt_pos) += r.pieces_tokens;
  if (r.replay_pos == r.replay_ids.size() && !r.replay_ids.empty()) {
    r.replay_ids = std::vector<int32_t>();  // done: free the copy
    r.replay_pos = 0;
  }
  return true;
}

void Scheduler::PromptStep() {
  for (Running& r : running_) {
    if (r.phase == Phase::kStart) StartTurn(r);
  }
  prefill_order_.clear();
  bool decoding = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i].phase == Phase::kPrefill) prefill_order_.push_back(i);
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
    // A chunk never crosses from the replayed history into the prompt.
    while (r.phase == Phase::kPrefill) {
      if (r.in_pieces) {
        if (!ContinuePieces(r)) break;
        continue;
      }
      const size_t left = r.replay_pos < r.replay_ids.size()
                              ? r.replay_ids.size() - r.replay_pos
                              : r.job->prompt_ids.size() - r.prompt_pos;
      if (left == 0) {
        EndPrompt(r);
        break;
      }
      const size_t take = ChunkTokens(r, left, step_budget_ms, contended);
      if (take == 0) break;
      if (bounded && take < left) {
        // A long rest: in pieces, so no single unit of it outlasts the credit by more
        // than one piece, however long its context.
        StartPieces(r, left);
        continue;
      }
      PrefillChunk(r, take);
      if (take < left) break;  // one chunk per turn and step
    }
  }
}

void Scheduler::EndPrompt(Running& r) {
  TurnJob& job = *r.job;
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
