// Object names and head-object encodings of the RADOS backend (no librados here, so they
// are testable on their own). docs/memory-store.md, "RADOS backend", describes the layout.
//
//   h.<len(tenant)>.<tenant>.<session>          head object of a session:
//       xattr "gen"   compare-and-set generation, decimal (random start, +1 per commit)
//       xattr "meta"  SessionMeta (records.h encoding)
//       omap  "v<version, 16 hex>" -> nonce (8 bytes BE) + VersionRecord
//   p.<len(tenant)>.<tenant>.<len(session)>.<session>.<version, 16 hex>.<nonce, 16 hex>
//       a version's payload, written once before the commit that lists it; the nonce makes
//       every write attempt its own object, so racing writers never touch each other's
//   t.<tenant>        omap: session id -> "" (every session of the tenant, for listing)
//   kvfold.tenants    omap: tenant -> ""
// Lengths make the names unambiguous although tenants and session ids may contain '.'.
#ifndef KVFOLD_MEMORY_SVC_STORE_RADOS_LAYOUT_H_
#define KVFOLD_MEMORY_SVC_STORE_RADOS_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "memory_svc/store/records.h"

namespace kvfold::memory_svc::rados_layout {

inline constexpr char kTenantsObject[] = "kvfold.tenants";
inline constexpr char kGenXattr[] = "gen";
inline constexpr char kMetaXattr[] = "meta";

std::string HeadObject(absl::string_view tenant, absl::string_view session_id);
std::string IndexObject(absl::string_view tenant);
std::string PayloadObject(absl::string_view tenant, absl::string_view session_id,
                          uint64_t version, uint64_t nonce);
// "v" + 16 lowercase hex digits: byte order == numeric order.
std::string VersionKey(uint64_t version);

struct PayloadName {
  std::string tenant;
  std::string session_id;
  uint64_t version = 0;
  uint64_t nonce = 0;
};
// nullopt for names that are not payload objects.
std::optional<PayloadName> ParsePayloadObject(absl::string_view name);

// The omap value of a version on its head object.
std::string EncodeVersionEntry(uint64_t nonce, const VersionRecord& record);
struct VersionEntry {
  uint64_t nonce = 0;
  VersionRecord record;
};
// DATA_LOSS when the bytes are damaged.
absl::StatusOr<VersionEntry> DecodeVersionEntry(absl::string_view bytes);
// Only the nonce (no header parse): DATA_LOSS when shorter than 8 bytes.
absl::StatusOr<uint64_t> DecodeVersionNonce(absl::string_view bytes);

}  // namespace kvfold::memory_svc::rados_layout

#endif  // KVFOLD_MEMORY_SVC_STORE_RADOS_LAYOUT_H_
