#include "inference_svc/engine/session.h"

#include "absl/strings/str_cat.h"

namespace kvfold::engine {

const char* KvModeName(KvMode mode) {
  switch (mode) {
    case KvMode::kFull:
      return "full";
    case KvMode::kSliding:
      return "sliding";
    case KvMode::kSink:
      return "sink";
    case KvMode::kMemory:
      return "memory";
    case KvMode::kMemoryOnly:
      return "memory_only";
  }
  return "?";
}

absl::StatusOr<KvMode> ParseKvMode(std::string_view name) {
  for (KvMode m : {KvMode::kFull, KvMode::kSliding, KvMode::kSink, KvMode::kMemory,
                   KvMode::kMemoryOnly}) {
    if (name == KvModeName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown mode '", std::string(name), "' (expected full, sliding, sink, memory, memory_only)"));
}

absl::Status Session::Append(int32_t token_id) { return Prefill(std::span<const int32_t>(&token_id, 1)); }

absl::Status Session::StartPrefill(std::span<const int32_t> token_ids) {
  if (token_ids.empty()) return absl::InvalidArgumentError("StartPrefill: no tokens");
  pending_prefill_ = token_ids;
  return absl::OkStatus();
}

absl::StatusOr<bool> Session::ContinuePrefill(double) {
  if (pending_prefill_.empty()) {
    return absl::FailedPreconditionError("ContinuePrefill: no prefill started");
  }
  const std::span<const int32_t> ids = pending_prefill_;
  pending_prefill_ = {};
  if (absl::Status s = Prefill(ids); !s.ok()) return s;
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
