#include "inference_svc/service/validation.h"

#include "common/rng.h"

namespace kvfold::service {

std::string NewSessionId() { return "s-" + RandomHex(16); }

}  // namespace kvfold::service
