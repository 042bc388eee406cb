// MemoryStore: durable, versioned memory blocks per (tenant, session) on a storage backend:
// embedded RocksDB (default) or a Ceph RADOS pool shared by any number of processes.
//
// Data model per session: a monotonically increasing version counter (versions are never
// reused), a head pointer, immutable versions (header + payload + checksum), created and
// updated times, and a pinned set. Every mutation of a session is computed from the
// session record it read and committed atomically only if that record is still current
// (compare-and-set in the backend: a RocksDB WriteBatch under the session's lock, or a
// RADOS compound operation on the session's head object), so a version is either wholly
// committed or invisible, also across crashes and across processes. Reads see one
// consistent view of a session.
//
// Tenants scope everything: a session id names a different session in every tenant, and a
// tenant can neither see nor detect another tenant's sessions (NOT_FOUND).
//
// Status codes (every method):
//   INVALID_ARGUMENT   bad tenant, session id, version or header (message names it)
//   NOT_FOUND          unknown, deleted or expired session; unknown or retired version
//   ABORTED            compare-and-set lost; the message names the current head
//   ALREADY_EXISTS     Fork into an existing session
//   RESOURCE_EXHAUSTED block over max_block_bytes; disk full
//   DATA_LOSS          checksum mismatch (on write: the caller's; on read: the disk's)
//   UNAVAILABLE        the store is closed, or the backend reported a retryable error
//   INTERNAL           anything else the backend reports
// Thread-safe. Only the backends' .cc files include RocksDB or librados.
#ifndef KVFOLD_MEMORY_SVC_STORE_MEMORY_STORE_H_
#define KVFOLD_MEMORY_SVC_STORE_MEMORY_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvfold/v1/common.pb.h"
#include "kvfold/v1/memory_store.pb.h"

namespace kvfold::memory_svc {

enum class BackendKind { kRocksDb, kRados };

// The RADOS backend's cluster and pool (docs/memory-store.md, "RADOS backend").
struct RadosOptions {
  // ceph.conf with the monitors (mon_host). Required.
  std::string conf_file;
  // Keyring with the user's cephx key; empty = whatever ceph.conf says (or auth none).
  std::string keyring_file;
  // cephx entity. Default: client.admin.
  std::string user = "client.admin";
  // Pool holding every object of the store. Required; must exist.
  std::string pool;
  // RADOS namespace inside the pool; empty = the default namespace. Several stores can
  // share a pool in different namespaces (tests use one each).
  std::string name_space;
  // Client-side timeout of every RADOS operation, seconds (then UNAVAILABLE). Default: 30.
  int op_timeout_seconds = 30;
};

struct StoreOptions {
  // Where records live. Default: RocksDB in db_dir.
  BackendKind backend = BackendKind::kRocksDb;
  // RocksDB directory; created when missing. Required with the RocksDB backend.
  std::string db_dir;
  // Required with the RADOS backend.
  RadosOptions rados;
  // RADOS: a version object not committed to its session this long after it was written is
  // garbage (its writer died or lost the compare-and-set) and is deleted by the background
  // collector, which runs every this long. Must exceed op_timeout_seconds. Default: 600.
  int64_t orphan_grace_seconds = 600;
  // fsync the WAL before a write is acknowledged. Default: true.
  bool sync_writes = true;
  // Newest versions retained per session (pinned versions and the head are kept on top).
  // Applied whenever a version is written. Must be >= 1. Default: 16.
  uint32_t versions_kept = 16;
  // Sessions not written for this long are expired: invisible at once, deleted by the
  // background sweep (or by the next create of the same id). 0 = never. Default: 0.
  int64_t idle_ttl_seconds = 0;
  // Period of the background TTL sweep; 0 = min(ttl / 2, 60 s). Ignored when TTL is off.
  int64_t sweep_interval_ms = 0;
  // Largest payload accepted. Default: 64 MiB.
  uint64_t max_block_bytes = 64ull << 20;
  // Payloads go to RocksDB's integrated BlobDB (blob files, not the LSM). Default: true.
  bool enable_blob_files = true;
  // Payloads at least this large are stored as blobs. Default: 64 KiB.
  uint64_t min_blob_size = 64 << 10;
  // LRU cache for blob values, filled at flush time too (prepopulate_blob_cache), so that
  // recently written heads are read from memory: a cold blob read costs several times an
  // inline read (bench_memory_store). 0 = no blob cache. Default: 256 MiB.
  uint64_t blob_cache_bytes = 256ull << 20;
  // Milliseconds since the Unix epoch; nullptr = the system clock (tests inject a clock).
  std::function<int64_t()> clock_ms;
};

// Sees a version's header once it is read and before its payload is (MemoryStore::Get): an
// error ends the read with that error (e.g. the caller could not make room for the
// payload). May run more than once for one read when a backend retries it.
using PayloadGate = std::function<absl::Status(const v1::MemoryBlockHeader& header)>;

// One version, read back and checksum-verified.
struct StoredBlock {
  v1::VersionInfo info;
  v1::MemoryBlockHeader header;
  std::string payload;
};

// One whole session, for copying it between stores (kvfold-memory-admin copy).
struct SessionExport {
  v1::SessionInfo info;
  std::vector<StoredBlock> versions;  // every retained version, ascending
};

struct SessionPage {
  std::vector<v1::SessionInfo> sessions;
  std::string next_page_token;  // empty on the last page
};

class MemoryStore {
 public:
  // Opens (or creates) the backend and starts the TTL sweeper when a TTL is set (and, on
  // RADOS, the collector of uncommitted versions). INVALID_ARGUMENT for bad options;
  // UNAVAILABLE/INTERNAL when the backend cannot open; UNIMPLEMENTED for RADOS in a build
  // without librados.
  static absl::StatusOr<std::unique_ptr<MemoryStore>> Open(StoreOptions options);
  ~MemoryStore();  // Close()s if still open.
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // Writes a new version (latest + 1) and makes it the head, iff the head equals
  // expected_head_version (0 = the session must not exist; it is created). Verifies
  // header.payload_size == payload.size() (INVALID_ARGUMENT) and header.checksum
  // (DATA_LOSS) first. NOT_FOUND when expected_head_version > 0 and the session does not
  // exist; ABORTED when the head differs.
  absl::StatusOr<v1::PutBlockResponse> Put(absl::string_view tenant, absl::string_view session_id,
                                           uint64_t expected_head_version,
                                           const v1::MemoryBlockHeader& header,
                                           absl::string_view payload, bool pin);

  // Reads a version (0 = head) and verifies its checksum (DATA_LOSS on mismatch).
  // `before_payload` (may be empty) sees the version's header before its payload is read;
  // an error it returns is Get's.
  absl::StatusOr<StoredBlock> Get(absl::string_view tenant, absl::string_view session_id,
                                  uint64_t version, const PayloadGate& before_payload = {}) const;

  // The session as ListSessions shows it (meta and the head's header fields).
  absl::StatusOr<v1::SessionInfo> GetSessionInfo(absl::string_view tenant,
                                                 absl::string_view session_id) const;

  // Every retained version, newest first (payloads are not read).
  absl::StatusOr<v1::ListVersionsResponse> ListVersions(absl::string_view tenant,
                                                        absl::string_view session_id) const;

  // Makes a retained version the head (roll back; history kept). expected_head_version,
  // when non-zero, must equal the current head (ABORTED otherwise). version 0 is invalid.
  absl::StatusOr<v1::SessionInfo> SetHead(absl::string_view tenant, absl::string_view session_id,
                                          uint64_t version, uint64_t expected_head_version);

  // Pins or unpins a version (0 = head). An unpinned old version is retired by the next
  // write's retention pass.
  absl::StatusOr<v1::VersionInfo> PinVersion(absl::string_view tenant,
                                             absl::string_view session_id, uint64_t version,
                                             bool pinned);

  // Copies one version (0 = head) of `source_session_id` into the new session
  // `new_session_id` as its version 1, atomically. ALREADY_EXISTS when the new id is taken.
  absl::StatusOr<v1::SessionInfo> Fork(absl::string_view tenant,
                                       absl::string_view source_session_id, uint64_t version,
                                       absl::string_view new_session_id);

  // Deletes a session and every version, then gives the space back (RocksDB compacts the
  // range away).
  // Returns the number of versions deleted.
  absl::StatusOr<uint32_t> Delete(absl::string_view tenant, absl::string_view session_id);

  // The tenant's live sessions ordered by id, after `page_token` (a previous response's
  // next_page_token; empty = from the start). page_size 1..1000.
  absl::StatusOr<SessionPage> ListSessions(absl::string_view tenant, uint32_t page_size,
                                           absl::string_view page_token) const;

  // Deletes every expired session now; returns how many. (The sweeper calls this.)
  absl::StatusOr<int> SweepExpiredSessions();

  // Deletes versions written but never committed that are older than `grace_seconds`
  // (RADOS; RocksDB never has any). Returns how many. (The sweeper calls this.)
  absl::StatusOr<int> CollectGarbage(int64_t grace_seconds);

  // Reads every retained version of a session, checksums verified. ABORTED when the
  // session changed while it was read.
  absl::StatusOr<SessionExport> ExportSession(absl::string_view tenant,
                                              absl::string_view session_id) const;

  // Writes an exported session as it was: the same version numbers, head, latest version,
  // pins, commit and session times, in one atomic commit, after verifying every block's
  // checksum (DATA_LOSS) and the export's consistency (INVALID_ARGUMENT). ALREADY_EXISTS
  // when the session id is taken.
  absl::Status ImportSession(absl::string_view tenant, const SessionExport& session);

  // Every session of every tenant, for copying a store (kvfold-memory-admin copy).
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ListAllSessions() const;

  // Stops the sweeper, flushes and closes the backend. Later calls on the
  // store return UNAVAILABLE. Idempotent.
  absl::Status Close();

  const StoreOptions& options() const { return options_; }

  // Test hook: flips one payload byte of a stored version in the backend, bypassing the checks,
  // so that tests can observe DATA_LOSS on read.
  absl::Status CorruptPayloadForTesting(absl::string_view tenant, absl::string_view session_id,
                                        uint64_t version);

 private:
  struct Impl;
  MemoryStore(StoreOptions options, std::unique_ptr<Impl> impl);

  StoreOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_STORE_MEMORY_STORE_H_
