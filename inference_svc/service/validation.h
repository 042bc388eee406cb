// Request validation for InferenceService: everything derived from a request is checked
// here and rejected with InvalidArgument before any work starts.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_

#include <string>

#include "absl/status/status.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::service {

// 1..256 printable ASCII characters (0x21..0x7e; no spaces). InvalidArgument otherwise.
absl::Status ValidateSessionId(const std::string& session_id);

// temperature finite and >= 0; top_k >= 0; top_p in [0, 1]; max_new_tokens in
// [0, max_new_tokens_cap]; stop ids >= 0 and < vocab_size. InvalidArgument otherwise.
absl::Status ValidateSampling(const v1::SamplingParams& params, int vocab_size,
                              int max_new_tokens_cap);

// `overrides` on top of `defaults`: every non-zero / non-empty field of overrides wins.
v1::SamplingParams MergeSampling(const v1::SamplingParams& defaults,
                                 const v1::SamplingParams& overrides);

// A random 16-byte hex id for sessions created without one.
std::string NewSessionId();

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_
