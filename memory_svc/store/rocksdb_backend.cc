// The embedded RocksDB backend: the only code in kvfold's store that includes RocksDB.
// Layout (column families, keys): records.h and docs/memory-store.md. A commit is one
// WriteBatch, atomic also across crashes; its compare-and-set runs under the session's
// stripe lock, which every commit of the session takes.
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/write_batch.h>

#include <array>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "memory_svc/store/backend.h"

namespace kvfold::memory_svc {
namespace {

constexpr size_t kLockStripes = 256;
constexpr char kSessionsCf[] = "sessions";
constexpr char kVersionsCf[] = "version_meta";
constexpr char kPayloadsCf[] = "payloads";

// rocksdb::Status -> absl::Status, the one translation (message keeps RocksDB's text):
//   OK                         -> OK
//   NotFound                   -> NOT_FOUND
//   Corruption                 -> DATA_LOSS
//   InvalidArgument            -> INVALID_ARGUMENT
//   NotSupported               -> UNIMPLEMENTED
//   IOError (NoSpace)          -> RESOURCE_EXHAUSTED
//   IOError (other)            -> UNAVAILABLE
//   Busy, TryAgain, Incomplete, ShutdownInProgress -> UNAVAILABLE
//   TimedOut, Expired          -> DEADLINE_EXCEEDED
//   Aborted                    -> ABORTED
//   CompactionTooLarge         -> RESOURCE_EXHAUSTED
//   MergeInProgress, ColumnFamilyDropped, anything else -> INTERNAL
absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  using C = rocksdb::Status::Code;
  if (s.ok()) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (s.code()) {
    case C::kNotFound: code = absl::StatusCode::kNotFound; break;
    case C::kCorruption: code = absl::StatusCode::kDataLoss; break;
    case C::kInvalidArgument: code = absl::StatusCode::kInvalidArgument; break;
    case C::kNotSupported: code = absl::StatusCode::kUnimplemented; break;
    case C::kIOError:
      code = s.IsNoSpace() ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kUnavailable;
      break;
    case C::kBusy:
    case C::kTryAgain:
    case C::kIncomplete:
    case C::kShutdownInProgress: code = absl::StatusCode::kUnavailable; break;
    case C::kTimedOut:
    case C::kExpired: code = absl::StatusCode::kDeadlineExceeded; break;
    case C::kAborted: code = absl::StatusCode::kAborted; break;
    case C::kCompactionTooLarge: code = absl::StatusCode::kResourceExhausted; break;
    default: code = absl::StatusCode::kInternal; break;
  }
  return absl::Status(code, absl::StrCat(what, ": rocksdb: ", s.ToString()));
}

class RocksDbBackend final : public StoreBackend {
 public:
  RocksDbBackend() = default;
  ~RocksDbBackend() override { Close().IgnoreError(); }

  absl::Status Open(const StoreOptions& options) {
    rocksdb::DBOptions db_options;
    db_options.create_if_missing = true;
    db_options.create_missing_column_families = true;
    db_options.max_background_jobs = 2;

    rocksdb::ColumnFamilyOptions small_cf;  // session and version records: tiny values
    small_cf.write_buffer_size = 8 << 20;
    rocksdb::ColumnFamilyOptions payload_cf;
    payload_cf.enable_blob_files = options.enable_blob_files;
    payload_cf.min_blob_size = options.min_blob_size;
    payload_cf.blob_file_size = 256ull << 20;
    payload_cf.enable_blob_garbage_collection = true;
    payload_cf.blob_garbage_collection_age_cutoff = 0.25;
    payload_cf.compression = rocksdb::kNoCompression;  // fp16 activations do not compress
    payload_cf.blob_compression_type = rocksdb::kNoCompression;
    payload_cf.write_buffer_size = 64 << 20;
    if (options.enable_blob_files && options.blob_cache_bytes > 0) {
      payload_cf.blob_cache = rocksdb::NewLRUCache(options.blob_cache_bytes);
      payload_cf.prepopulate_blob_cache = rocksdb::PrepopulateBlobCache::kFlushOnly;
    }
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
        {rocksdb::kDefaultColumnFamilyName, small_cf},
        {kSessionsCf, small_cf},
        {kVersionsCf, small_cf},
        {kPayloadsCf, payload_cf},
    };
    rocksdb::Status s = rocksdb::DB::Open(db_options, options.db_dir, cfs, &handles_, &db_);
    if (!s.ok()) return FromRocks(s, absl::StrCat("open ", options.db_dir));
    sessions_ = handles_[1];
    versions_ = handles_[2];
    payloads_ = handles_[3];
    write_options_.sync = options.sync_writes;
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<SessionState>> ReadSession(
      absl::string_view tenant, absl::string_view session_id) const override {
    std::string raw;
    return ReadState(SessionKey(tenant, session_id), nullptr, &raw);
  }

  absl::StatusOr<bool> Commit(absl::string_view tenant, absl::string_view session_id,
                              const SessionCommit& commit) override {
    const std::string skey = SessionKey(tenant, session_id);
    absl::MutexLock lock(&stripes_[absl::HashOf(skey) % kLockStripes]);
    std::string raw;
    absl::StatusOr<std::optional<SessionState>> current = ReadState(skey, nullptr, &raw);
    if (!current.ok()) return current.status();
    if (current->has_value() != commit.expected_token.has_value()) return false;
    if (current->has_value() && (*current)->cas_token != *commit.expected_token) return false;

    rocksdb::WriteBatch batch;
    if (commit.drop_all_versions || !commit.meta.has_value()) {
      const std::string begin = VersionPrefix(tenant, session_id);
      const std::string end = VersionPrefixEnd(tenant, session_id);
      batch.DeleteRange(versions_, begin, end);
      batch.DeleteRange(payloads_, begin, end);
    }
    for (uint64_t victim : commit.retired_versions) {
      const std::string vkey = VersionKey(tenant, session_id, victim);
      batch.Delete(versions_, vkey);
      batch.Delete(payloads_, vkey);
    }
    for (const NewVersion& v : commit.new_versions) {
      const std::string vkey = VersionKey(tenant, session_id, v.version);
      batch.Put(versions_, vkey, EncodeVersionRecord(v.record));
      batch.Put(payloads_, vkey, rocksdb::Slice(v.payload.data(), v.payload.size()));
    }
    if (commit.meta.has_value()) {
      batch.Put(sessions_, skey, EncodeSessionMeta(*commit.meta));
    } else {
      batch.Delete(sessions_, skey);
    }
    if (absl::Status s = FromRocks(db_->Write(write_options_, &batch), "commit"); !s.ok()) {
      return s;
    }
    return true;
  }

  absl::StatusOr<std::optional<BlockRead>> ReadBlock(
      absl::string_view tenant, absl::string_view session_id, uint64_t version, bool with_payload,
      const PayloadGate& before_payload) const override {
    rocksdb::ManagedSnapshot snapshot(db_);
    std::string raw;
    absl::StatusOr<std::optional<SessionState>> state =
        ReadState(SessionKey(tenant, session_id), snapshot.snapshot(), &raw);
    if (!state.ok()) return state.status();
    if (!state->has_value()) return std::optional<BlockRead>();
    BlockRead read;
    read.meta = std::move((*state)->meta);
    read.version = version == 0 ? read.meta.head_version : version;
    if (!read.meta.HasVersion(read.version)) return std::optional<BlockRead>(std::move(read));
    const std::string vkey = VersionKey(tenant, session_id, read.version);
    absl::StatusOr<VersionRecord> record = ReadVersionRecord(vkey, snapshot.snapshot());
    if (!record.ok()) return record.status();
    read.record = *std::move(record);
    if (with_payload) {
      if (before_payload) {
        if (absl::Status s = before_payload(read.record->header); !s.ok()) return s;
      }
      rocksdb::ReadOptions ro;
      ro.snapshot = snapshot.snapshot();
      rocksdb::Status s = db_->Get(ro, payloads_, vkey, &read.payload);
      if (s.IsNotFound()) return absl::DataLossError("payload missing");
      if (!s.ok()) return FromRocks(s, "read payload");
    }
    return std::optional<BlockRead>(std::move(read));
  }

  absl::StatusOr<std::optional<std::pair<SessionMeta, std::vector<VersionRecord>>>>
  ReadVersionRecords(absl::string_view tenant, absl::string_view session_id) const override {
    using Result = std::optional<std::pair<SessionMeta, std::vector<VersionRecord>>>;
    rocksdb::ManagedSnapshot snapshot(db_);
    std::string raw;
    absl::StatusOr<std::optional<SessionState>> state =
        ReadState(SessionKey(tenant, session_id), snapshot.snapshot(), &raw);
    if (!state.ok()) return state.status();
    if (!state->has_value()) return Result();
    std::vector<VersionRecord> records;
    for (uint64_t v : (*state)->meta.versions) {
      absl::StatusOr<VersionRecord> record =
          ReadVersionRecord(VersionKey(tenant, session_id, v), snapshot.snapshot());
      if (!record.ok()) return record.status();
      records.push_back(*std::move(record));
    }
    return Result(std::make_pair(std::move((*state)->meta), std::move(records)));
  }

  absl::StatusOr<std::vector<std::pair<std::string, SessionMeta>>> ScanSessions(
      absl::string_view tenant, absl::string_view after, uint32_t limit) const override {
    const std::string prefix = TenantPrefix(tenant);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), sessions_));
    std::vector<std::pair<std::string, SessionMeta>> out;
    for (it->Seek(prefix + std::string(after)); it->Valid() && out.size() < limit; it->Next()) {
      const rocksdb::Slice key = it->key();
      if (!key.starts_with(prefix)) break;
      absl::string_view id(key.data() + prefix.size(), key.size() - prefix.size());
      if (!after.empty() && id == after) continue;  // strictly after
      absl::StatusOr<SessionMeta> meta =
          DecodeSessionMeta(absl::string_view(it->value().data(), it->value().size()));
      if (!meta.ok()) return meta.status();
      out.emplace_back(std::string(id), *std::move(meta));
    }
    if (absl::Status s = FromRocks(it->status(), "list sessions"); !s.ok()) return s;
    return out;
  }

  absl::StatusOr<std::vector<SessionEntry>> ScanAllSessions() const override {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), sessions_));
    std::vector<SessionEntry> out;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      absl::StatusOr<SessionMeta> meta =
          DecodeSessionMeta(absl::string_view(it->value().data(), it->value().size()));
      if (!meta.ok()) continue;  // a damaged record is reported when it is read
      const absl::string_view key(it->key().data(), it->key().size());
      const size_t sep = key.find('\0');
      if (sep == absl::string_view::npos) continue;
      out.push_back({std::string(key.substr(0, sep)), std::string(key.substr(sep + 1)),
                     *std::move(meta)});
    }
    if (absl::Status s = FromRocks(it->status(), "scan sessions"); !s.ok()) return s;
    return out;
  }

  // Compacts a deleted session's key range so that its bytes leave the disk (range
  // tombstones and blob references go; blob files follow via blob GC).
  absl::Status ReclaimDeleted(absl::string_view tenant, absl::string_view session_id) override {
    const std::string begin = VersionPrefix(tenant, session_id);
    const std::string end = VersionPrefixEnd(tenant, session_id);
    const rocksdb::Slice b(begin), e(end);
    rocksdb::CompactRangeOptions options;
    options.exclusive_manual_compaction = false;
    options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    for (rocksdb::ColumnFamilyHandle* cf : {versions_, payloads_}) {
      if (absl::Status s = FromRocks(db_->CompactRange(options, cf, &b, &e), "compact");
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> CollectGarbage(int64_t /*grace_ms*/) override { return 0; }
  bool NeedsGarbageCollection() const override { return false; }

  absl::Status CorruptPayloadForTesting(absl::string_view tenant, absl::string_view session_id,
                                        uint64_t version) override {
    const std::string vkey = VersionKey(tenant, session_id, version);
    std::string payload;
    if (absl::Status s = FromRocks(db_->Get(rocksdb::ReadOptions(), payloads_, vkey, &payload),
                                   "read payload");
        !s.ok()) {
      return s;
    }
    if (payload.empty()) return absl::FailedPreconditionError("empty payload");
    payload[payload.size() / 2] ^= 0x01;
    return FromRocks(db_->Put(write_options_, payloads_, vkey, payload), "corrupt payload");
  }

  absl::Status Close() override {
    if (db_ == nullptr) return absl::OkStatus();
    absl::Status status;
    rocksdb::FlushOptions flush;
    flush.wait = true;
    status.Update(FromRocks(db_->Flush(flush, handles_), "flush"));
    status.Update(FromRocks(db_->FlushWAL(/*sync=*/true), "flush WAL"));
    for (rocksdb::ColumnFamilyHandle* h : handles_) {
      status.Update(FromRocks(db_->DestroyColumnFamilyHandle(h), "close column family"));
    }
    handles_.clear();
    status.Update(FromRocks(db_->Close(), "close"));
    delete db_;
    db_ = nullptr;
    return status;
  }

 private:
  // The session record as of `snapshot` (nullptr = latest); its raw bytes are the token.
  absl::StatusOr<std::optional<SessionState>> ReadState(const std::string& key,
                                                        const rocksdb::Snapshot* snapshot,
                                                        std::string* raw) const {
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot;
    rocksdb::Status s = db_->Get(ro, sessions_, key, raw);
    if (s.IsNotFound()) return std::optional<SessionState>();
    if (!s.ok()) return FromRocks(s, "read session record");
    absl::StatusOr<SessionMeta> meta = DecodeSessionMeta(*raw);
    if (!meta.ok()) return meta.status();
    return std::optional<SessionState>(SessionState{*std::move(meta), *raw});
  }

  absl::StatusOr<VersionRecord> ReadVersionRecord(const std::string& key,
                                                  const rocksdb::Snapshot* snapshot) const {
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot;
    std::string value;
    rocksdb::Status s = db_->Get(ro, versions_, key, &value);
    // The session record lists this version, so its absence is damage, not a miss.
    if (s.IsNotFound()) return absl::DataLossError("version record missing");
    if (!s.ok()) return FromRocks(s, "read version record");
    return DecodeVersionRecord(value);
  }

  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* sessions_ = nullptr;
  rocksdb::ColumnFamilyHandle* versions_ = nullptr;
  rocksdb::ColumnFamilyHandle* payloads_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::WriteOptions write_options_;
  std::array<absl::Mutex, kLockStripes> stripes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StoreBackend>> OpenRocksDbBackend(const StoreOptions& options) {
  if (options.db_dir.empty()) return absl::InvalidArgumentError("db_dir is required");
  auto backend = std::make_unique<RocksDbBackend>();
  if (absl::Status s = backend->Open(options); !s.ok()) return s;
  return backend;
}

}  // namespace kvfold::memory_svc
