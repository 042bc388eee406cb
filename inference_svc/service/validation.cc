#include "inference_svc/service/validation.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace kvfold::service {

absl::Status ValidateSessionId(const std::string& session_id) {
  if (session_id.empty()) return absl::InvalidArgumentError("session_id is empty");
  if (session_id.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("session_id is ", session_id.size(), " bytes (max 256)"));
  }
  for (unsigned char c : session_id) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError("session_id must be printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

std::string NewSessionId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id = "s-";
  for (int i = 0; i < 16; ++i) id.push_back(kHex[rng() & 15]);
  return id;
}

}  // namespace kvfold::service
