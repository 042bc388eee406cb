// Request validation for InferenceService: session ids and new ids. Sampling values and
// prompts are checked by the runtime (inference_svc/runtime/sampling.h, runtime.h).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_

#include <string>

#include "absl/status/status.h"

namespace kvfold::service {

// 1..256 printable ASCII characters (0x21..0x7e; no spaces). InvalidArgument otherwise.
absl::Status ValidateSessionId(const std::string& session_id);

// A random 16-byte hex id for sessions created without one.
std::string NewSessionId();

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_
