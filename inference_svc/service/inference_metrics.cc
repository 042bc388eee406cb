#include "inference_svc/service/inference_metrics.h"

#include <algorithm>
#include <utility>

namespace kvfold::service {
namespace {

// Latency buckets: 1 ms .. ~65 s (x2 per bucket) for whole requests and TTFT; 0.5 ms ..
// ~2 s for the time between two tokens.
std::vector<double> LatencyBuckets() { return metrics::ExponentialBuckets(0.001, 2, 17); }
std::vector<double> TokenBuckets() { return metrics::ExponentialBuckets(0.0005, 2, 13); }

constexpr char kTokensHelp[] =
    "Tokens processed: prompt (prefilled), generated, folded into memory.";
constexpr char kRestoresHelp[] =
    "Turns that started from a restored session: from the local cache or from the store.";
constexpr char kAdmissionHelp[] = "Admission decisions against the KV pool.";

const char* FrontLabel(Front front) { return front == Front::kGrpc ? "grpc" : "http"; }

}  // namespace

InferenceMetrics::InferenceMetrics(metrics::Registry* registry) : registry_(registry) {
  ttft_ = &registry->GetHistogram(
      "kvfold_inference_ttft_seconds",
      "Time from the start of a generating call (gRPC or HTTP) to its first generated token.",
      LatencyBuckets());
  inter_token_ = &registry->GetHistogram(
      "kvfold_inference_inter_token_seconds",
      "Time between two generated tokens (each turn's decode time over its tokens).",
      TokenBuckets());
  prompt_tokens_ =
      &registry->GetCounter("kvfold_inference_tokens_total", kTokensHelp, {{"kind", "prompt"}});
  generated_tokens_ =
      &registry->GetCounter("kvfold_inference_tokens_total", kTokensHelp, {{"kind", "generated"}});
  folded_tokens_ =
      &registry->GetCounter("kvfold_inference_tokens_total", kTokensHelp, {{"kind", "folded"}});
  restores_[0] = &registry->GetCounter("kvfold_inference_restores_total", kRestoresHelp,
                                       {{"source", "cache"}});
  restores_[1] = &registry->GetCounter("kvfold_inference_restores_total", kRestoresHelp,
                                       {{"source", "store"}});
  const char* decisions[] = {"admit", "reject"};
  for (int i = 0; i < 2; ++i) {
    admission_[i] = &registry->GetCounter("kvfold_inference_admission_total", kAdmissionHelp,
                                          {{"decision", decisions[i]}});
  }
  for (Front front : {Front::kGrpc, Front::kHttp}) {
    request_seconds_[static_cast<int>(front)] = &registry->GetHistogram(
        "kvfold_inference_request_seconds", "Duration of a request, arrival to final status.",
        LatencyBuckets(), {{"front", FrontLabel(front)}});
  }
  // The OK series exist from the start, so the family is on the page before the first call.
  for (Front front : {Front::kGrpc, Front::kHttp}) RequestCounter(front, absl::StatusCode::kOk);
}

metrics::Counter* InferenceMetrics::RequestCounter(Front front, absl::StatusCode code) {
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNumCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
  std::atomic<metrics::Counter*>& slot = requests_[static_cast<int>(front) * kNumCodes + c];
  metrics::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // The registry returns the same series to racing threads.
    counter = &registry_->GetCounter(
        "kvfold_inference_requests_total", "Finished requests by front and status code.",
        {{"front", FrontLabel(front)},
         {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}});
    slot.store(counter, std::memory_order_release);
  }
  return counter;
}

void InferenceMetrics::RequestDone(Front front, absl::StatusCode code, double seconds) {
  RequestCounter(front, code)->Increment();
  request_seconds_[static_cast<int>(front)]->Observe(seconds);
}

void InferenceMetrics::TurnDone(const TurnMetrics& turn) {
  prompt_tokens_->Increment(static_cast<double>(turn.prompt_tokens));
  generated_tokens_->Increment(static_cast<double>(turn.generated_tokens));
  folded_tokens_->Increment(static_cast<double>(turn.folded_tokens));
  if (turn.generated_tokens == 0) return;
  ttft_->Observe(turn.ttft_seconds);
  if (turn.generated_tokens > 1) {
    const uint64_t gaps = turn.generated_tokens - 1;
    inter_token_->ObserveMany(turn.decode_seconds / static_cast<double>(gaps), gaps);
  }
}

void InferenceMetrics::Restored(RestoreSource source) {
  restores_[source == RestoreSource::kCache ? 0 : 1]->Increment();
}

void InferenceMetrics::Admission(AdmissionDecision decision) {
  admission_[static_cast<int>(decision)]->Increment();
}

void InferenceMetrics::TurnFinished(const absl::StatusOr<runtime::TurnUsage>& outcome) {
  if (!outcome.ok()) {
    if (runtime::RetryAfter(outcome.status()).has_value()) Admission(AdmissionDecision::kReject);
    return;
  }
  Admission(AdmissionDecision::kAdmit);
  Restored(outcome->restored_from_store ? RestoreSource::kStore : RestoreSource::kCache);
  TurnMetrics turn;
  turn.prompt_tokens = outcome->prompt_tokens;
  turn.generated_tokens = outcome->generated_tokens;
  turn.folded_tokens = static_cast<uint64_t>(std::max<int64_t>(0, outcome->tokens_folded));
  turn.ttft_seconds = outcome->ttft_ms / 1000.0;
  turn.decode_seconds = outcome->decode_ms / 1000.0;
  TurnDone(turn);
}

void InferenceMetrics::SetGaugeSources(std::function<double()> kv_pool_utilization,
                                       std::function<double()> active_sessions,
                                       std::function<double()> queue_depth) {
  registry_->AddCallbackGauge("kvfold_inference_kv_pool_utilization",
                              "Fraction of the KV pool in use (0..1).",
                              std::move(kv_pool_utilization));
  registry_->AddCallbackGauge("kvfold_inference_active_sessions",
                              "Turns running on the scheduler now.", std::move(active_sessions));
  registry_->AddCallbackGauge("kvfold_inference_queue_depth", "Turns waiting for a scheduler slot.",
                              std::move(queue_depth));
}

std::vector<std::pair<std::string, double>> TurnTimingsMs(const runtime::TurnUsage& u) {
  return {{"ttft", u.ttft_ms},
          {"queue", u.queue_ms},
          {"restore", u.restore_ms},
          {"prefill", u.prefill_ms},
          {"decode", u.decode_ms},
          {"fold", u.fold_ms},
          {"checkpoint", u.checkpoint_ms},
          {"total", u.total_ms}};
}

}  // namespace kvfold::service
