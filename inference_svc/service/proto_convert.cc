#include "inference_svc/service/proto_convert.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/proto_enums.h"

namespace kvfold::service {

runtime::SamplingSpec FromProto(const v1::SamplingParams& p) {
  runtime::SamplingSpec s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.seed = p.seed();
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  s.max_new_tokens = p.max_new_tokens();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.repetition_penalty = p.repetition_penalty();
  s.min_p = p.min_p();
  s.min_tokens = static_cast<int>(std::min<uint32_t>(p.min_tokens(), INT32_MAX));
  s.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  std::sort(s.logit_bias.begin(), s.logit_bias.end());  // a map's order is unspecified
  return s;
}

v1::SamplingParams ToProto(const runtime::SamplingSpec& s) {
  v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_k(s.top_k);
  p.set_top_p(s.top_p);
  p.set_seed(s.seed);
  for (int32_t id : s.stop_token_ids) p.add_stop_token_ids(id);
  p.set_ignore_eos(s.ignore_eos);
  p.set_max_new_tokens(s.max_new_tokens);
  p.set_presence_penalty(s.presence_penalty);
  p.set_frequency_penalty(s.frequency_penalty);
  p.set_repetition_penalty(s.repetition_penalty);
  p.set_min_p(s.min_p);
  p.set_min_tokens(static_cast<uint32_t>(s.min_tokens));
  for (const auto& [id, bias] : s.logit_bias) (*p.mutable_logit_bias())[id] = bias;
  return p;
}

absl::StatusOr<runtime::SessionRequest> FromProto(const v1::SessionConfig& c) {
  runtime::SessionRequest r;
  if (c.mode() != v1::KV_MODE_UNSPECIFIED) {
    absl::StatusOr<core::KvMode> mode = KvModeFromProto(c.mode());
    if (!mode.ok()) return mode.status();
    r.mode = *mode;
  }
  if (c.window_size() > (1u << 24)) return absl::InvalidArgumentError("window_size too large");
  if (c.sink_tokens() > (1u << 24)) return absl::InvalidArgumentError("sink_tokens too large");
  r.window_size = static_cast<int>(c.window_size());
  r.sink_tokens = static_cast<int>(c.sink_tokens());
  return r;
}

v1::FinishReason ToProto(runtime::FinishReason reason) {
  switch (reason) {
    case runtime::FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case runtime::FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case runtime::FinishReason::kNone:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

absl::StatusOr<int> TopLogprobsFromProto(bool logprobs, uint32_t top_logprobs) {
  if (top_logprobs > static_cast<uint32_t>(engine::kMaxTopLogprobs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_logprobs is ", top_logprobs, "; it must be in [0, ", engine::kMaxTopLogprobs, "]"));
  }
  if (!logprobs) {
    if (top_logprobs > 0) return absl::InvalidArgumentError("top_logprobs needs logprobs");
    return -1;
  }
  return static_cast<int>(top_logprobs);
}

void ToProto(int32_t token_id, const engine::TokenLogprobs& logprobs, v1::TokenLogprob* out) {
  out->set_token_id(token_id);
  out->set_logprob(logprobs.logprob);
  for (int k = 0; k < logprobs.num_top; ++k) {
    v1::TopLogprob* top = out->add_top_logprobs();
    top->set_token_id(logprobs.top_ids[k]);
    top->set_logprob(logprobs.top_logprobs[k]);
  }
}

void FillUsage(const runtime::TurnUsage& u, const std::string& replica, v1::Usage* out) {
  out->set_prompt_tokens(u.prompt_tokens);
  out->set_cached_prompt_tokens(u.cached_prompt_tokens);
  out->set_generated_tokens(u.generated_tokens);
  out->set_memory_version(u.version);
  out->set_kv_bytes_resident(u.kv_bytes_resident);
  out->set_restored_from_store(u.restored_from_store);
  out->set_replica(replica);
  out->set_tokens_folded(static_cast<uint32_t>(u.tokens_folded));
  v1::Timings* t = out->mutable_timings();
  t->set_queue_ms(u.queue_ms);
  t->set_restore_ms(u.restore_ms);
  t->set_prefill_ms(u.prefill_ms);
  t->set_decode_ms(u.decode_ms);
  t->set_fold_ms(u.fold_ms);
  t->set_checkpoint_ms(u.checkpoint_ms);
  t->set_time_to_first_token_ms(u.ttft_ms);
  t->set_total_ms(u.total_ms);
}

}  // namespace kvfold::service
