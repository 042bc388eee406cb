// Request validation for InferenceService: session ids (the one rule of core/session_id.h,
// which the store applies too) and new ids. Sampling values and prompts are checked by the
// runtime (inference_svc/runtime/sampling.h, runtime.h).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_

#include <string>

#include "absl/status/status.h"
#include "core/session_id.h"

namespace kvfold::service {

using core::ValidateSessionId;

// A random 16-byte hex id for sessions created without one.
std::string NewSessionId();

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_VALIDATION_H_
