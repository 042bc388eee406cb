#include "inference_svc/service/store_sessions.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference_svc/memory/session_block.h"
#include "inference_svc/service/proto_convert.h"

namespace kvfold::service {

absl::Status StoreError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kCancelled:
      std::fprintf(stderr, "kvfold-inference: store call failed: %s\n",
                   status.ToString().c_str());
      return absl::Status(status.code(),
                          absl::StrCat("the memory store is unavailable (",
                                       absl::StatusCodeToString(status.code()),
                                       "); retry with backoff"));
    default:
      return status;
  }
}

StoreSessions::StoreSessions(StoreGateway* gateway, const engine::Engine* engine,
                             const memory::Projector* projector)
    : gateway_(gateway), engine_(engine), projector_(projector) {}

absl::StatusOr<uint64_t> StoreSessions::HeadVersion(const runtime::Caller& caller,
                                                    const std::string& session_id) {
  auto info = gateway_->GetSessionInfo(caller.store_credential, session_id);
  if (!info.ok()) return StoreError(info.status());
  return info->head_version();
}

absl::StatusOr<runtime::Checkpoint> StoreSessions::Load(const runtime::Caller& caller,
                                                        const std::string& session_id,
                                                        uint64_t version) {
  auto block = gateway_->GetBlock(caller.store_credential, session_id, version, nullptr);
  if (!block.ok()) return StoreError(block.status());
  const v1::MemoryBlockHeader& h = block->header;
  // Checksum, model and projector fingerprints, geometry (memory_block.h's codes).
  auto state = memory::ImportSessionBlock(*block, memory::ExpectationsFor(*engine_, projector_));
  if (!state.ok()) return state.status();
  runtime::Checkpoint checkpoint;
  checkpoint.state = std::move(*state);
  checkpoint.sampling = FromProto(h.sampler_state().params());
  // Missing words stay zero: the runtime restarts such an RNG from the session's seed.
  if (h.sampler_state().rng_state_size() == 4) {
    for (int i = 0; i < 4; ++i) checkpoint.rng_state[i] = h.sampler_state().rng_state(i);
  }
  return checkpoint;
}

absl::StatusOr<uint64_t> StoreSessions::Commit(const runtime::Caller& caller,
                                               const std::string& session_id,
                                               uint64_t expected_head,
                                               const runtime::Checkpoint& checkpoint) {
  v1::SamplerState sampler;
  *sampler.mutable_params() = ToProto(checkpoint.sampling);
  for (uint64_t w : checkpoint.rng_state) sampler.add_rng_state(w);
  auto block = memory::ExportSessionBlock(checkpoint.state,
                                         memory::IdentityFor(*engine_, projector_), sampler);
  if (!block.ok()) return block.status();
  if (checkpoint.turn.has_value()) {
    const runtime::TurnRecord& t = *checkpoint.turn;
    v1::TurnRecord* out = block->header.mutable_turn();
    out->set_front_record(t.front_record);
    out->set_prompt_tokens(t.prompt_tokens);
    out->set_cached_prompt_tokens(t.cached_prompt_tokens);
    out->set_generated_tokens(t.generated_tokens);
    out->set_tokens_folded(t.tokens_folded);
    out->set_finish_reason(t.finish_reason);
    out->set_replica(t.replica);
    memory::SealMemoryBlock(&*block);  // format 2, the checksum over the record too
  }
  auto version = gateway_->PutBlock(caller.store_credential, session_id, expected_head, *block);
  if (!version.ok()) return StoreError(version.status());
  return *version;
}

}  // namespace kvfold::service
