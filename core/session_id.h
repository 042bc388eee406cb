// Names that come from clients: session ids (requests) and tenants (tokens files). One rule
// for both services, so a session the store accepts is one every replica can serve
// (docs/contracts.md, "Session ids").
#ifndef KVFOLD_CORE_SESSION_ID_H_
#define KVFOLD_CORE_SESSION_ID_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvfold::core {

inline constexpr size_t kMaxSessionIdBytes = 256;

// OK for 1..256 bytes of printable ASCII without spaces (0x21..0x7e); InvalidArgument
// naming the length or the first offending byte and its offset otherwise.
absl::Status ValidateSessionId(absl::string_view session_id);

// The same rule for a tenant name (its messages say "tenant").
absl::Status ValidateTenant(absl::string_view tenant);

}  // namespace kvfold::core

#endif  // KVFOLD_CORE_SESSION_ID_H_
