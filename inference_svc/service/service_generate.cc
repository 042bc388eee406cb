// InferenceServiceImpl::Generate: read the head, continue or restore, stream the turn,
// checkpoint with compare-and-set. See inference_service.h and docs/service.md.
#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "inference_svc/planner/admission.h"
#include "inference_svc/service/inference_service.h"
#include "inference_svc/service/session_codec.h"
#include "inference_svc/service/validation.h"

namespace kvfold::service {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Clears LiveSession::busy on every exit path.
class BusyGuard {
 public:
  explicit BusyGuard(LiveSession* live) : live_(live) {}
  ~BusyGuard() { live_->busy.store(false); }

 private:
  LiveSession* live_;
};

bool CallEnded(grpc::ServerContext* context) {
  return context->IsCancelled() || context->deadline() < std::chrono::system_clock::now();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> InferenceServiceImpl::PromptIds(
    const v1::GenerateRequest& request, bool session_empty) const {
  if (!request.prompt().empty() && request.prompt_token_ids_size() > 0) {
    return absl::InvalidArgumentError("set prompt or prompt_token_ids, not both");
  }
  std::vector<int32_t> ids;
  const int vocab_size = deps_.engine->config().vocab_size;
  if (!request.prompt().empty()) {
    if (deps_.tokenizer == nullptr) {
      return absl::FailedPreconditionError(
          "this replica has no tokenizer: send prompt_token_ids instead of text");
    }
    // Refuse absurd texts before tokenizing them (a token is at least one byte).
    if (request.prompt().size() > 16ull * config_.max_prompt_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("prompt is ", request.prompt().size(),
                                                     " bytes, too long"));
    }
    auto encoded = deps_.tokenizer->Encode(request.prompt(), /*add_bos=*/session_empty);
    if (!encoded.ok()) return encoded.status();
    ids = std::move(*encoded);
  } else {
    ids.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt token id ", id, " outside [0, ", vocab_size, ")"));
      }
    }
  }
  if (ids.size() > config_.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prompt is ", ids.size(),
                                                   " tokens (max ", config_.max_prompt_tokens,
                                                   ")"));
  }
  if (ids.empty() && session_empty) {
    // Nothing to condition on yet: start from BOS, like a plain `generate`.
    ids.push_back(deps_.engine->config().bos_token_id);
  }
  return ids;
}

uint64_t InferenceServiceImpl::ProjectedNewKvBytes(const LiveSession& live,
                                                   const Turn& turn) const {
  // Resident entries now: the state to restore, or the cached copy (whose blocks are
  // already counted in the pool's used bytes).
  uint64_t current = 0;
  if (turn.restore_state.has_value()) {
    current = turn.restore_state->window_token_ids.size() + turn.restore_state->mem_slots +
              turn.restore_state->sink_token_ids.size();
  } else {
    current = static_cast<uint64_t>(live.resident_tokens.load());
  }
  uint64_t projected = current + turn.prompt_ids.size() +
                       static_cast<uint64_t>(std::max(0, turn.sampling.max_new_tokens));
  // Each mode caps what stays resident (docs/memory-mode.md, engine/kv_cache.h).
  const uint64_t window = live.config.window_size();
  switch (live.config.mode()) {
    case v1::KV_MODE_SLIDING:
      projected = std::min<uint64_t>(projected, window);
      break;
    case v1::KV_MODE_SINK:
      projected = std::min<uint64_t>(projected, window + live.config.sink_tokens());
      break;
    case v1::KV_MODE_MEMORY:
    case v1::KV_MODE_MEMORY_ONLY:
      if (deps_.projector != nullptr) {
        const auto& p = deps_.projector->config();
        projected = std::min<uint64_t>(projected, window + p.chunk_size + p.mem_slots);
      }
      break;
    default:
      break;
  }
  const uint64_t already_counted = turn.restore_state.has_value() ? 0 : current;
  return projected > already_counted ? (projected - already_counted) * kv_bytes_per_token_ : 0;
}

grpc::Status InferenceServiceImpl::Generate(grpc::ServerContext* context,
                                            const v1::GenerateRequest* request,
                                            grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return GenerateImpl(context, request, writer);
}

grpc::Status InferenceServiceImpl::GenerateImpl(grpc::ServerContext* context,
                                                const v1::GenerateRequest* request,
                                                grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const Clock::time_point call_start = Clock::now();
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const std::string& session_id = request->session_id();
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return ToGrpcStatus(s);
  const int vocab_size = deps_.engine->config().vocab_size;
  const int cap = static_cast<int>(config_.max_new_tokens_cap);
  if (absl::Status s = ValidateSampling(request->sampling(), vocab_size, cap); !s.ok()) {
    return ToGrpcStatus(s);
  }

  // 1. The store's head is the truth.
  auto info = deps_.store->GetSessionInfo(caller->store_token, session_id);
  if (!info.ok()) return ToGrpcStatus(info.status());
  const uint64_t head = info->head_version();
  const std::string key = CacheKey(*caller, session_id);

  // 2. A current cached copy, or a restore from the head block.
  const Clock::time_point restore_start = Clock::now();
  std::shared_ptr<LiveSession> live = cache_.Get(key);
  std::optional<engine::SessionState> restore_state;
  double fetch_ms = 0;
  if (live != nullptr && live->busy.load()) {
    return ToGrpcStatus(absl::AbortedError(absl::StrCat(
        "session ", session_id, " has a turn in progress on this replica; retry")));
  }
  if (live == nullptr || live->version.load() != head) {
    auto block = deps_.store->GetBlock(caller->store_token, session_id, head, nullptr);
    if (!block.ok()) return ToGrpcStatus(block.status());
    engine::SessionState state;
    auto rebuilt = LiveFromBlock(*caller, session_id, *block, head, &state);
    if (!rebuilt.ok()) return ToGrpcStatus(rebuilt.status());
    live = std::move(*rebuilt);
    restore_state = std::move(state);
    fetch_ms = MsSince(restore_start);
  }
  bool expected_idle = false;
  if (!live->busy.compare_exchange_strong(expected_idle, true)) {
    return ToGrpcStatus(absl::AbortedError(absl::StrCat(
        "session ", session_id, " has a turn in progress on this replica; retry")));
  }
  BusyGuard busy_guard(live.get());

  // 3. Sampling and prompt.
  v1::SamplingParams merged = MergeSampling(live->sampling, request->sampling());
  if (absl::Status s = ValidateSampling(merged, vocab_size, cap); !s.ok()) return ToGrpcStatus(s);
  const bool session_empty = live->total_tokens.load() == 0;
  auto prompt = PromptIds(*request, session_empty);
  if (!prompt.ok()) return ToGrpcStatus(prompt.status());

  auto turn = std::make_shared<Turn>();
  turn->live = live;
  turn->restore_state = std::move(restore_state);
  turn->prompt_ids = std::move(*prompt);
  turn->sampling = ToEngineSampling(merged);
  if (request->sampling().seed() != 0) turn->reseed = request->sampling().seed();

  // 4. Admission against the KV pool.
  planner::AdmissionRequest admission;
  admission.pool_bytes = deps_.scheduler->kv_pool_bytes();
  admission.used_bytes = deps_.scheduler->kv_used_bytes();
  admission.requested_bytes = ProjectedNewKvBytes(*live, *turn);
  admission.max_new_tokens = static_cast<uint32_t>(std::max(1, turn->sampling.max_new_tokens));
  planner::AdmissionDecision decision = planner::Admit(admission);
  if (decision.tier != planner::AdmissionTier::kAdmit && cache_.size() > 0) {
    // Idle cached sessions hold pool blocks too: drop them (they are only a cache; the
    // scheduler frees their blocks on its next step) and judge again.
    cache_.Clear();
    for (int i = 0; i < 20 && deps_.scheduler->kv_used_bytes() >= admission.used_bytes; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    admission.used_bytes = deps_.scheduler->kv_used_bytes();
    decision = planner::Admit(admission);
  }
  if (!decision.admitted) {
    context->AddTrailingMetadata("retry-after-ms", std::to_string(decision.retry_after_ms));
    return ToGrpcStatus(planner::AdmissionStatus(decision));
  }
  turn->sampling.max_new_tokens = static_cast<int>(decision.max_new_tokens);

  // 5. Run on the scheduler and stream.
  deps_.scheduler->Submit(turn);
  std::optional<IncrementalDecoder> decoder;
  // Generated text continues the prompt's text: only a turn that starts from BOS alone
  // begins a text (and drops the dummy-prefix space, as Decode does).
  const bool text_start =
      session_empty && turn->prompt_ids.size() == 1 &&
      turn->prompt_ids[0] == deps_.engine->config().bos_token_id;
  if (deps_.tokenizer != nullptr) decoder.emplace(deps_.tokenizer, text_start);
  if (request->echo() && !turn->prompt_ids.empty()) {
    v1::GenerateResponse echo;
    for (int32_t id : turn->prompt_ids) echo.mutable_delta()->add_token_ids(id);
    if (deps_.tokenizer != nullptr) {
      echo.mutable_delta()->set_text(deps_.tokenizer->Decode(turn->prompt_ids));
    }
    writer->Write(echo);
  }
  absl::Status outcome;
  bool done = false;
  bool client_gone = false;
  std::vector<TurnEvent> events;
  while (!done) {
    events.clear();
    turn->events.PopAll(std::chrono::milliseconds(20), &events);
    if (!client_gone && CallEnded(context)) {
      client_gone = true;
      turn->cancelled.store(true);
    }
    v1::GenerateResponse response;
    for (TurnEvent& e : events) {
      if (e.kind == TurnEvent::Kind::kTokens) {
        for (int32_t id : e.token_ids) {
          response.mutable_delta()->add_token_ids(id);
          if (decoder.has_value()) response.mutable_delta()->mutable_text()->append(decoder->Push(id));
        }
      } else {
        outcome = e.status;
        done = true;
      }
    }
    if (done && outcome.ok() && decoder.has_value()) {
      std::string tail = decoder->Flush();
      if (!tail.empty()) response.mutable_delta()->mutable_text()->append(tail);
    }
    if (response.has_delta() && !client_gone) writer->Write(response);
  }
  if (client_gone || turn->cancelled.load()) {
    // A cancelled turn is never committed; the scheduler dropped the derived state.
    live->version.store(0);
    cache_.Erase(key);
    if (context->deadline() < std::chrono::system_clock::now()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed during the turn");
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
  }
  if (!outcome.ok()) {
    live->version.store(0);
    cache_.Erase(key);
    return ToGrpcStatus(outcome);
  }

  // 6. Checkpoint with compare-and-set on the head this turn started from.
  const Clock::time_point checkpoint_start = Clock::now();
  auto block = BlockFromTurn(*live, *turn);
  absl::StatusOr<uint64_t> version =
      block.ok() ? deps_.store->PutBlock(caller->store_token, session_id, head, *block)
                 : absl::StatusOr<uint64_t>(block.status());
  const double checkpoint_ms = MsSince(checkpoint_start);
  if (!version.ok()) {
    // The derived state is ahead of the store: drop it; the store's head stays the truth.
    live->version.store(0);
    cache_.Erase(key);
    return ToGrpcStatus(version.status());
  }
  live->version.store(*version);
  if (decision.retain_reusable_cache) {
    CacheCommitted(key, live);
  } else {
    cache_.Erase(key);
  }

  // 7. The final message.
  v1::GenerateResponse final_response;
  v1::GenerateFinal* final_message = final_response.mutable_final();
  final_message->set_finish_reason(turn->finish_reason);
  if (!decision.warning.empty()) final_message->add_warnings(decision.warning);
  v1::Usage* usage = final_message->mutable_usage();
  usage->set_prompt_tokens(static_cast<uint32_t>(turn->prompt_ids.size()));
  usage->set_generated_tokens(turn->generated_tokens);
  usage->set_memory_version(*version);
  usage->set_kv_bytes_resident(live->kv_bytes_resident.load());
  usage->set_restored_from_store(turn->restore_state.has_value());
  usage->set_replica(replica_name_);
  v1::Timings* t = usage->mutable_timings();
  t->set_queue_ms(turn->queue_ms);
  t->set_restore_ms(fetch_ms + turn->restore_ms);
  t->set_prefill_ms(turn->prefill_ms);
  t->set_decode_ms(turn->decode_ms);
  t->set_fold_ms(turn->fold_ms);
  t->set_checkpoint_ms(checkpoint_ms);
  t->set_time_to_first_token_ms(turn->generated_tokens > 0
                                    ? turn->ttft_ms + std::chrono::duration<double, std::milli>(
                                                          turn->submitted_at - call_start)
                                                          .count()
                                    : 0);
  t->set_total_ms(MsSince(call_start));
  usage->set_tokens_folded(static_cast<uint32_t>(turn->tokens_folded_in_turn));
  writer->Write(final_response);
  return grpc::Status::OK;
}

}  // namespace kvfold::service
