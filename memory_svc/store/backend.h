// StoreBackend: where MemoryStore keeps its records. MemoryStore owns the semantics (ids,
// checks, compare-and-set decisions, retention, TTL); a backend only reads records and
// applies one session's change atomically, guarded by the record it was computed from.
//
// Two implementations: RocksDB (embedded, one process; rocksdb_backend.cc) and Ceph RADOS
// (shared by any number of processes; rados_backend.cc). docs/memory-store.md describes
// both layouts. Internal to memory_svc/store.
#ifndef KVFOLD_MEMORY_SVC_STORE_BACKEND_H_
#define KVFOLD_MEMORY_SVC_STORE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "memory_svc/store/memory_store.h"
#include "memory_svc/store/records.h"

namespace kvfold::memory_svc {

// A session record as read, with the token that a commit must present to replace it.
struct SessionState {
  SessionMeta meta;
  std::string cas_token;  // opaque to MemoryStore
};

struct NewVersion {
  uint64_t version = 0;
  VersionRecord record;
  absl::string_view payload;  // must outlive Commit()
};

// One atomic change of one session.
struct SessionCommit {
  // The record this change was computed from (SessionState::cas_token); nullopt = the
  // session must not exist.
  std::optional<std::string> expected_token;
  // The new session record; nullopt = delete the session (record and every version).
  std::optional<SessionMeta> meta;
  // Every stored version of the session goes first (an expired session being replaced).
  bool drop_all_versions = false;
  std::vector<uint64_t> retired_versions;
  std::vector<NewVersion> new_versions;  // a put or fork adds one, a copy all
};

// A session record and, when it lists the requested version, that version.
struct BlockRead {
  SessionMeta meta;
  uint64_t version = 0;                 // the requested one (0 resolved to the head)
  std::optional<VersionRecord> record;  // nullopt when meta does not list `version`
  std::string payload;                  // read only when asked for
};

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;

  // nullopt when the session has no record.
  virtual absl::StatusOr<std::optional<SessionState>> ReadSession(
      absl::string_view tenant, absl::string_view session_id) const = 0;

  // Applies `commit` iff the stored record still is the one `expected_token` names. true:
  // applied; false: the record changed in between (nothing applied; re-read and decide
  // again). A version being written is invisible until the commit succeeds.
  virtual absl::StatusOr<bool> Commit(absl::string_view tenant, absl::string_view session_id,
                                      const SessionCommit& commit) = 0;

  // The session record and version `version` (0 = head) as one consistent view; nullopt
  // when the session has no record. DATA_LOSS when the record lists the version but its
  // bytes are gone. With `with_payload`, `before_payload` (may be empty) runs before the
  // payload is read.
  virtual absl::StatusOr<std::optional<BlockRead>> ReadBlock(
      absl::string_view tenant, absl::string_view session_id, uint64_t version, bool with_payload,
      const PayloadGate& before_payload) const = 0;

  // The session record and the records of every version it lists (same order), consistent.
  virtual absl::StatusOr<std::optional<std::pair<SessionMeta, std::vector<VersionRecord>>>>
  ReadVersionRecords(absl::string_view tenant, absl::string_view session_id) const = 0;

  // Up to `limit` sessions of `tenant` with ids greater than `after` ("" = from the start),
  // ascending by id, expired ones included.
  virtual absl::StatusOr<std::vector<std::pair<std::string, SessionMeta>>> ScanSessions(
      absl::string_view tenant, absl::string_view after, uint32_t limit) const = 0;

  // Every (tenant, session id, record) in the store (the TTL sweep).
  struct SessionEntry {
    std::string tenant;
    std::string session_id;
    SessionMeta meta;
  };
  virtual absl::StatusOr<std::vector<SessionEntry>> ScanAllSessions() const = 0;

  // After a session was deleted: give its space back (RocksDB compacts its key range).
  virtual absl::Status ReclaimDeleted(absl::string_view tenant, absl::string_view session_id) = 0;

  // Deletes versions written but never committed (a writer that died between writing a
  // version and committing the head), when older than `grace_ms`. Returns how many.
  virtual absl::StatusOr<int> CollectGarbage(int64_t grace_ms) = 0;

  // Whether CollectGarbage has anything to do (RocksDB commits atomically: never).
  virtual bool NeedsGarbageCollection() const = 0;

  // Flips one payload byte of a stored version, bypassing every check (tests).
  virtual absl::Status CorruptPayloadForTesting(absl::string_view tenant,
                                                absl::string_view session_id,
                                                uint64_t version) = 0;

  // Flushes and releases everything; later calls are not allowed.
  virtual absl::Status Close() = 0;
};

// RocksDB in options.db_dir. INVALID_ARGUMENT without db_dir; UNAVAILABLE/INTERNAL when
// RocksDB cannot open.
absl::StatusOr<std::unique_ptr<StoreBackend>> OpenRocksDbBackend(const StoreOptions& options);

// RADOS: options.rados. UNIMPLEMENTED when kvfold was built without librados;
// INVALID_ARGUMENT for missing settings; UNAVAILABLE when the cluster or pool cannot be
// reached.
absl::StatusOr<std::unique_ptr<StoreBackend>> OpenRadosBackend(const StoreOptions& options);

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_STORE_BACKEND_H_
