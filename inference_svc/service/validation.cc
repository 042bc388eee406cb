#include "inference_svc/service/validation.h"

#include <cmath>
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

absl::Status ValidateSampling(const v1::SamplingParams& p, int vocab_size,
                              int max_new_tokens_cap) {
  if (!std::isfinite(p.temperature()) || p.temperature() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0, got ", p.temperature()));
  }
  if (p.top_k() < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", p.top_k()));
  if (!std::isfinite(p.top_p()) || p.top_p() < 0 || p.top_p() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in [0, 1], got ", p.top_p()));
  }
  if (p.max_new_tokens() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 0, got ", p.max_new_tokens()));
  }
  if (p.max_new_tokens() > max_new_tokens_cap) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens ", p.max_new_tokens(),
                                                   " exceeds the server cap ",
                                                   max_new_tokens_cap));
  }
  for (int id : p.stop_token_ids()) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop token id ", id, " outside [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

v1::SamplingParams MergeSampling(const v1::SamplingParams& defaults,
                                 const v1::SamplingParams& o) {
  v1::SamplingParams out = defaults;
  if (o.temperature() != 0) out.set_temperature(o.temperature());
  if (o.top_k() != 0) out.set_top_k(o.top_k());
  if (o.top_p() != 0) out.set_top_p(o.top_p());
  if (o.seed() != 0) out.set_seed(o.seed());
  if (o.stop_token_ids_size() > 0) *out.mutable_stop_token_ids() = o.stop_token_ids();
  if (o.ignore_eos()) out.set_ignore_eos(true);
  if (o.max_new_tokens() != 0) out.set_max_new_tokens(o.max_new_tokens());
  return out;
}

std::string NewSessionId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id = "s-";
  for (int i = 0; i < 16; ++i) id.push_back(kHex[rng() & 15]);
  return id;
}

}  // namespace kvfold::service
