// Internal to memory_svc/store: the RocksDB state behind MemoryStore, shared by its two
// implementation files. Not for use outside the store.
#ifndef KVFOLD_MEMORY_SVC_STORE_STORE_IMPL_H_
#define KVFOLD_MEMORY_SVC_STORE_STORE_IMPL_H_

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/write_batch.h>

#include <array>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "memory_svc/store/memory_store.h"
#include "memory_svc/store/records.h"
#include "memory_svc/store/validation.h"

namespace kvfold::memory {

// The one rocksdb::Status -> absl::Status translation (table in memory_store.cc).
absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what);

inline constexpr size_t kLockStripes = 256;
inline constexpr char kSessionsCf[] = "sessions";
inline constexpr char kVersionsCf[] = "version_meta";
inline constexpr char kPayloadsCf[] = "payloads";

inline absl::Status SessionNotFound(absl::string_view session_id) {
  return absl::NotFoundError(absl::StrCat("session '", session_id, "' not found"));
}

inline v1::SessionInfo MakeSessionInfo(absl::string_view session_id, const SessionMeta& meta) {
  v1::SessionInfo info;
  info.set_session_id(std::string(session_id));
  info.set_head_version(meta.head_version);
  info.set_latest_version(meta.latest_version);
  info.set_num_versions(static_cast<uint32_t>(meta.versions.size()));
  info.set_created_unix_ms(meta.created_unix_ms);
  info.set_updated_unix_ms(meta.updated_unix_ms);
  info.set_total_tokens(meta.total_tokens);
  return info;
}

inline v1::VersionInfo MakeVersionInfo(uint64_t version, const SessionMeta& meta,
                                const VersionRecord& record) {
  v1::VersionInfo info;
  info.set_version(version);
  info.set_payload_size(record.header.payload_size());
  info.set_checksum(record.header.checksum());
  info.set_pinned(meta.IsPinned(version));
  info.set_is_head(version == meta.head_version);
  info.set_created_unix_ms(record.created_unix_ms);
  info.set_total_tokens(record.header.total_tokens());
  info.set_tokens_folded(record.header.tokens_folded());
  return info;
}

struct MemoryStore::Impl {
  rocksdb::DB* db = nullptr;
  rocksdb::ColumnFamilyHandle* sessions = nullptr;
  rocksdb::ColumnFamilyHandle* versions = nullptr;
  rocksdb::ColumnFamilyHandle* payloads = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::WriteOptions write_options;

  // Readers hold it shared, Close() exclusive: no call runs on a closed DB.
  mutable absl::Mutex open_mu;
  bool closed ABSL_GUARDED_BY(open_mu) = false;
  // Per-session write locks, striped by hash of the session key.
  std::array<absl::Mutex, kLockStripes> stripes;

  absl::Mutex sweep_mu;
  absl::CondVar sweep_cv;
  bool stop_sweeper ABSL_GUARDED_BY(sweep_mu) = false;
  std::thread sweeper;

  absl::Mutex& StripeFor(const std::string& session_key) {
    return stripes[absl::HashOf(session_key) % kLockStripes];
  }

  // The session record as of `snapshot` (nullptr = latest); nullopt when absent.
  absl::StatusOr<std::optional<SessionMeta>> ReadMeta(const std::string& key,
                                                      const rocksdb::Snapshot* snapshot) const {
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot;
    std::string value;
    rocksdb::Status s = db->Get(ro, sessions, key, &value);
    if (s.IsNotFound()) return std::optional<SessionMeta>();
    if (!s.ok()) return FromRocks(s, "read session record");
    absl::StatusOr<SessionMeta> meta = DecodeSessionMeta(value);
    if (!meta.ok()) return meta.status();
    return std::optional<SessionMeta>(*std::move(meta));
  }

  absl::StatusOr<VersionRecord> ReadVersionRecord(const std::string& key,
                                                  const rocksdb::Snapshot* snapshot) const {
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot;
    std::string value;
    rocksdb::Status s = db->Get(ro, versions, key, &value);
    // The session record lists this version, so its absence is damage, not a miss.
    if (s.IsNotFound()) return absl::DataLossError("version record missing");
    if (!s.ok()) return FromRocks(s, "read version record");
    return DecodeVersionRecord(value);
  }

  absl::Status ReadPayload(const std::string& key, const rocksdb::Snapshot* snapshot,
                           std::string* payload) const {
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot;
    rocksdb::Status s = db->Get(ro, payloads, key, payload);
    if (s.IsNotFound()) return absl::DataLossError("payload missing");
    return FromRocks(s, "read payload");
  }

  // Deletes every version of a session in `batch` (both column families).
  void DeleteAllVersions(absl::string_view tenant, absl::string_view session_id,
                         rocksdb::WriteBatch* batch) const {
    const std::string begin = VersionPrefix(tenant, session_id);
    const std::string end = VersionPrefixEnd(tenant, session_id);
    batch->DeleteRange(versions, begin, end);
    batch->DeleteRange(payloads, begin, end);
  }

  absl::Status Write(rocksdb::WriteBatch* batch, absl::string_view what) {
    return FromRocks(db->Write(write_options, batch), what);
  }

  // Caller holds the session's stripe: deletes its record and every version atomically.
  absl::Status DeleteSessionLocked(absl::string_view tenant, absl::string_view session_id) {
    rocksdb::WriteBatch batch;
    DeleteAllVersions(tenant, session_id, &batch);
    batch.Delete(sessions, SessionKey(tenant, session_id));
    return Write(&batch, "delete session");
  }

  // Compacts a deleted session's key range so that its bytes leave the disk (range
  // tombstones and blob references go; blob files follow via blob GC).
  absl::Status CompactSession(absl::string_view tenant, absl::string_view session_id) {
    const std::string begin = VersionPrefix(tenant, session_id);
    const std::string end = VersionPrefixEnd(tenant, session_id);
    const rocksdb::Slice b(begin), e(end);
    rocksdb::CompactRangeOptions options;
    options.exclusive_manual_compaction = false;
    options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    for (rocksdb::ColumnFamilyHandle* cf : {versions, payloads}) {
      if (absl::Status s = FromRocks(db->CompactRange(options, cf, &b, &e), "compact");
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
};

#define KVFOLD_STORE_OPEN_OR_RETURN()                                         \
  absl::ReaderMutexLock open_lock(&impl_->open_mu);                           \
  if (impl_->closed) return absl::UnavailableError("memory store is closed")

inline bool Expired(const StoreOptions& options, const SessionMeta& meta, int64_t now_ms) {
  return options.idle_ttl_seconds > 0 &&
         now_ms - meta.updated_unix_ms >= options.idle_ttl_seconds * 1000;
}

inline absl::Status CheckIds(absl::string_view tenant, absl::string_view session_id) {
  if (absl::Status s = ValidateTenant(tenant); !s.ok()) return s;
  return ValidateSessionId(session_id);
}

}  // namespace kvfold::memory

#endif  // KVFOLD_MEMORY_SVC_STORE_STORE_IMPL_H_
