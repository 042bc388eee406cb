#include "core/session_id.h"

#include "absl/strings/str_cat.h"

namespace kvfold::core {
namespace {

absl::Status ValidateName(absl::string_view value, const char* what) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  if (value.size() > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", value.size(),
                                                   " bytes; the limit is ", kMaxSessionIdBytes));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c <= 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must be printable ASCII without spaces (byte 0x", absl::Hex(c, absl::kZeroPad2),
          " at offset ", i, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSessionId(absl::string_view session_id) {
  return ValidateName(session_id, "session_id");
}

absl::Status ValidateTenant(absl::string_view tenant) { return ValidateName(tenant, "tenant"); }

}  // namespace kvfold::core
