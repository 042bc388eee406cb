#include "inference_svc/engine/session.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace kvfold::engine {

absl::Status Session::Append(int32_t token_id) { return Prefill(std::span<const int32_t>(&token_id, 1)); }

void Session::ObserveRows(const SequenceOutput& output) const {
  const size_t vocab = output.num_logit_rows > 0 ? output.logits.size() / output.num_logit_rows : 0;
  for (int r = 0; r < output.num_logit_rows; ++r) {
    row_observer_(output.logits.subspan(static_cast<size_t>(r) * vocab, vocab));
  }
}

absl::Status Session::CheckCopy(const Session& other, int64_t tokens) const {
  if (TotalTokens() != 0 || ResidentTokens() != 0) {
    return absl::FailedPreconditionError("CopyFrom: session is not fresh");
  }
  if (other.PrefillInFlight()) {
    return absl::FailedPreconditionError("CopyFrom: the other session has a prompt in flight");
  }
  if (tokens != other.TotalTokens() && (tokens < 1 || tokens > other.TotalTokens())) {
    return absl::FailedPreconditionError(
        absl::StrCat("CopyPrefixFrom: ", tokens, " tokens of a session of ", other.TotalTokens()));
  }
  return absl::OkStatus();
}

absl::Status Session::StartPrefill(std::span<const int32_t> token_ids) {
  if (token_ids.empty()) return absl::InvalidArgumentError("StartPrefill: no tokens");
  pending_prefill_ = token_ids;
  pending_fed_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<bool> Session::ContinuePrefill(double budget_ms) {
  constexpr size_t kProbeTokens = 16, kMaxChunkTokens = 256;
  if (pending_fed_ >= pending_prefill_.size()) {
    return absl::FailedPreconditionError("ContinuePrefill: no prefill started");
  }
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  const auto t0 = Clock::now();
  do {
    const double left_ms = std::max(0.0, budget_ms - ms_since(t0));
    size_t take = prefill_ms_per_token_ > 0
                      ? static_cast<size_t>(std::clamp(left_ms / prefill_ms_per_token_, 1.0,
                                                       static_cast<double>(kMaxChunkTokens)))
                      : kProbeTokens;
    take = std::min(take, pending_prefill_.size() - pending_fed_);
    const auto t1 = Clock::now();
    if (absl::Status s = Prefill(pending_prefill_.subspan(pending_fed_, take)); !s.ok()) {
      pending_prefill_ = {};
      pending_fed_ = 0;
      return s;
    }
    prefill_ms_per_token_ = ms_since(t1) / static_cast<double>(take);
    pending_fed_ += take;
  } while (pending_fed_ < pending_prefill_.size() && ms_since(t0) < budget_ms);
  if (pending_fed_ < pending_prefill_.size()) return false;
  pending_prefill_ = {};
  pending_fed_ = 0;
  return true;
}

absl::Status AppendBatch(Engine& engine, std::span<Session* const> sessions,
                         std::span<const int32_t> token_ids, ForwardResult* scratch) {
  if (sessions.size() != token_ids.size()) {
    return absl::InvalidArgumentError("AppendBatch: one token id per session");
  }
  if (sessions.empty()) return absl::OkStatus();
  scratch->batch_inputs.resize(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (absl::Status s = sessions[i]->PrepareAppend(token_ids[i], &scratch->batch_inputs[i]);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = engine.Forward(scratch->batch_inputs, scratch); !s.ok()) return s;
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (absl::Status s = sessions[i]->FinishAppend(scratch->outputs[i]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kvfold::engine
