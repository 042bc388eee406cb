// Key layout and record encodings of the memory store (no RocksDB here, so the codec is
// testable on its own). docs/memory-store.md describes the layout for operators.
//
// Column families and keys (numbers big-endian so that byte order == numeric order):
//   sessions      tenant \0 session_id                   -> SessionMeta
//   version_meta  tenant \0 session_id \0 version(u64 BE) -> VersionRecord (header, time)
//   payloads      tenant \0 session_id \0 version(u64 BE) -> payload bytes (BlobDB)
// Tenants and session ids are printable ASCII, so '\0' cannot occur inside them and the
// separators keep one session's versions contiguous and sessions ordered by id.
#ifndef KVFOLD_MEMORY_SVC_STORE_RECORDS_H_
#define KVFOLD_MEMORY_SVC_STORE_RECORDS_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::memory_svc {

// tenant \0 session_id
std::string SessionKey(absl::string_view tenant, absl::string_view session_id);
// tenant \0  (every session key of the tenant starts with it)
std::string TenantPrefix(absl::string_view tenant);
// tenant \0 session_id \0  (every version key of the session starts with it)
std::string VersionPrefix(absl::string_view tenant, absl::string_view session_id);
// The smallest key greater than every key that starts with VersionPrefix().
std::string VersionPrefixEnd(absl::string_view tenant, absl::string_view session_id);
// tenant \0 session_id \0 version(8 bytes big-endian)
std::string VersionKey(absl::string_view tenant, absl::string_view session_id, uint64_t version);

// The per-session record, rewritten by every mutation of the session.
struct SessionMeta {
  uint64_t head_version = 0;
  uint64_t latest_version = 0;   // highest version ever assigned; never reused
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;   // last write (put, set head, pin, fork); drives the TTL
  uint64_t total_tokens = 0;     // of the head version
  std::vector<uint64_t> versions;  // retained versions, ascending
  std::vector<uint64_t> pinned;    // pinned versions, ascending, subset of versions

  bool HasVersion(uint64_t version) const;
  bool IsPinned(uint64_t version) const;
};

// Format: 'S' 0x01, head, latest, created, updated, total_tokens (8 bytes BE each),
// u32 BE count + versions, u32 BE count + pinned, then XXH3-64 (BE) of everything before.
std::string EncodeSessionMeta(const SessionMeta& meta);
// DATA_LOSS when the bytes are truncated, of another format, or fail their checksum.
absl::StatusOr<SessionMeta> DecodeSessionMeta(absl::string_view bytes);

// The small, payload-free half of a version.
struct VersionRecord {
  int64_t created_unix_ms = 0;  // commit time in the store
  v1::MemoryBlockHeader header;  // as written, checksum included
};

// Format: 'V' 0x01, created (8 bytes BE), serialized header.
std::string EncodeVersionRecord(const VersionRecord& record);
// DATA_LOSS when the bytes do not parse.
absl::StatusOr<VersionRecord> DecodeVersionRecord(absl::string_view bytes);

// Retention: which of meta.versions to delete so that the newest `versions_kept`, every
// pinned version and the head remain. Ascending.
std::vector<uint64_t> RetentionVictims(const SessionMeta& meta, uint32_t versions_kept);

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_STORE_RECORDS_H_
