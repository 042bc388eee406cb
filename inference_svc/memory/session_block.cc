#include "inference_svc/memory/session_block.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/proto_enums.h"
#include "inference_svc/memory/memory_session.h"

namespace kvfold::memory {

using core::KvMode;

v1::SamplerState SamplerStateToProto(const engine::SamplingParams& params,
                                     const std::array<uint64_t, 4>& rng_state) {
  v1::SamplerState proto;
  v1::SamplingParams* p = proto.mutable_params();
  p->set_temperature(params.temperature);
  p->set_top_k(params.top_k);
  p->set_top_p(params.top_p);
  p->set_seed(params.seed);
  for (int32_t id : params.stop_token_ids) p->add_stop_token_ids(id);
  p->set_ignore_eos(params.ignore_eos);
  p->set_max_new_tokens(params.max_new_tokens);
  p->set_presence_penalty(params.presence_penalty);
  p->set_frequency_penalty(params.frequency_penalty);
  // 1 (off) is stored as unset, so a block without penalties keeps its earlier bytes.
  p->set_repetition_penalty(params.repetition_penalty == 1.0f ? 0.0f : params.repetition_penalty);
  p->set_min_p(params.min_p);
  for (const auto& [id, bias] : params.logit_bias) (*p->mutable_logit_bias())[id] = bias;
  for (uint64_t w : rng_state) proto.add_rng_state(w);
  return proto;
}

absl::Status SamplerStateFromProto(const v1::SamplerState& proto, engine::SamplingParams* params,
                                   std::array<uint64_t, 4>* rng_state) {
  if (proto.rng_state_size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler state: ", proto.rng_state_size(), " RNG words, expected 4"));
  }
  bool all_zero = true;
  for (int i = 0; i < 4; ++i) {
    (*rng_state)[i] = proto.rng_state(i);
    all_zero = all_zero && proto.rng_state(i) == 0;
  }
  if (all_zero) return absl::InvalidArgumentError("sampler state: all-zero RNG state");
  const v1::SamplingParams& p = proto.params();
  engine::SamplingParams out;
  out.temperature = p.temperature();
  out.top_k = p.top_k();
  out.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  out.seed = p.seed();
  out.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  out.ignore_eos = p.ignore_eos();
  if (p.max_new_tokens() > 0) out.max_new_tokens = p.max_new_tokens();
  out.presence_penalty = p.presence_penalty();
  out.frequency_penalty = p.frequency_penalty();
  out.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  out.min_p = p.min_p();
  out.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  std::sort(out.logit_bias.begin(), out.logit_bias.end());
  if (auto s = out.Validate(); !s.ok()) return s;
  *params = std::move(out);
  return absl::OkStatus();
}

absl::StatusOr<MemoryBlock> ExportSessionBlock(const engine::SessionState& state,
                                               const BlockIdentity& identity,
                                               const v1::SamplerState& sampler, v1::Dtype dtype) {
  if (state.memory.size() != static_cast<size_t>(state.mem_slots) * identity.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat("ExportSessionBlock: ", state.memory.size(),
                                                   " memory floats for mem_slots ", state.mem_slots,
                                                   " x hidden_size ", identity.hidden_size));
  }
  MemoryBlock block;
  auto payload = EncodeMemoryPayload(state.memory, dtype);
  if (!payload.ok()) return payload.status();
  block.payload = *std::move(payload);
  v1::MemoryBlockHeader& h = block.header;
  const bool memory_mode = state.mode == KvMode::kMemory || state.mode == KvMode::kMemoryOnly;
  h.set_model_fingerprint(identity.model_fingerprint);
  if (memory_mode) h.set_projector_fingerprint(identity.projector_fingerprint);
  h.set_mem_slots(state.mem_slots);
  h.set_hidden_size(identity.hidden_size);
  h.set_dtype(dtype);
  h.set_tokens_folded(state.tokens_folded);
  h.set_total_tokens(state.total_tokens);
  h.mutable_window_token_ids()->Assign(state.window_token_ids.begin(), state.window_token_ids.end());
  *h.mutable_sampler_state() = sampler;
  h.set_kv_mode(KvModeToProto(state.mode));
  h.set_window_size(state.window_size);
  h.set_chunk_size(state.chunk_size);
  h.set_sink_tokens(state.sink_tokens);
  h.mutable_sink_token_ids()->Assign(state.sink_token_ids.begin(), state.sink_token_ids.end());
  h.set_created_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
  SealMemoryBlock(&block);
  return block;
}

absl::StatusOr<engine::SessionState> ImportSessionBlock(const MemoryBlock& block,
                                                        const BlockExpectations& expected,
                                                        v1::SamplerState* sampler) {
  if (auto s = ValidateMemoryBlock(block.header, block.payload, expected); !s.ok()) return s;
  const v1::MemoryBlockHeader& h = block.header;
  auto mode = KvModeFromProto(h.kv_mode());
  if (!mode.ok()) return mode.status();
  auto memory = DecodeMemoryPayload(h, block.payload);
  if (!memory.ok()) return memory.status();
  engine::SessionState state;
  state.mode = *mode;
  state.window_size = static_cast<int>(h.window_size());
  state.sink_tokens = static_cast<int>(h.sink_tokens());
  state.chunk_size = static_cast<int>(h.chunk_size());
  state.total_tokens = static_cast<int64_t>(h.total_tokens());
  state.tokens_folded = static_cast<int64_t>(h.tokens_folded());
  state.window_token_ids.assign(h.window_token_ids().begin(), h.window_token_ids().end());
  state.sink_token_ids.assign(h.sink_token_ids().begin(), h.sink_token_ids().end());
  state.mem_slots = static_cast<int>(h.mem_slots());
  state.memory = *std::move(memory);
  if (sampler != nullptr) *sampler = h.sampler_state();
  return state;
}

BlockIdentity IdentityFor(const engine::Engine& engine, const Projector* projector) {
  return {engine.fingerprint(), engine.config().hidden_size,
          projector ? projector->fingerprint() : std::string()};
}

BlockExpectations ExpectationsFor(const engine::Engine& engine, const Projector* projector) {
  BlockExpectations e;
  e.model_fingerprint = engine.fingerprint();
  e.hidden_size = engine.config().hidden_size;
  if (projector != nullptr) {
    e.projector_fingerprint = projector->fingerprint();
    e.projector_mem_slots = projector->config().mem_slots;
  }
  e.vocab_size = engine.config().vocab_size;
  return e;
}

}  // namespace kvfold::memory
