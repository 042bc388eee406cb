// The one place where the InferenceService's protobuf types meet the runtime's engine
// types: sampling, modes, finish reasons, usage.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_PROTO_CONVERT_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_PROTO_CONVERT_H_

#include "absl/status/statusor.h"
#include "inference_svc/runtime/runtime.h"
#include "kvfold/v1/inference.pb.h"

namespace kvfold::service {

runtime::SamplingSpec FromProto(const v1::SamplingParams& proto);
v1::SamplingParams ToProto(const runtime::SamplingSpec& spec);

// UNSPECIFIED -> mode unset (the replica's default); INVALID_ARGUMENT for unknown values.
absl::StatusOr<runtime::SessionRequest> FromProto(const v1::SessionConfig& config);

v1::FinishReason ToProto(runtime::FinishReason reason);

// GenerateRequest's (logprobs, top_logprobs) as TurnRequest::top_logprobs: -1 without
// logprobs; INVALID_ARGUMENT for top_logprobs above engine::kMaxTopLogprobs or set
// without logprobs.
absl::StatusOr<int> TopLogprobsFromProto(bool logprobs, uint32_t top_logprobs);
void ToProto(int32_t token_id, const engine::TokenLogprobs& logprobs, v1::TokenLogprob* out);

// Usage and timings of a finished turn; `replica` names this replica.
void FillUsage(const runtime::TurnUsage& usage, const std::string& replica, v1::Usage* out);

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_PROTO_CONVERT_H_
