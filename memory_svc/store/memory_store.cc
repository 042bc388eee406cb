// With memory_store_admin.cc and store_impl.h, the only code in kvfold that includes
// RocksDB (besides the benchmark's in-process baseline).
#include "memory_svc/store/memory_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/block_checksum.h"
#include "memory_svc/store/records.h"
#include "memory_svc/store/store_impl.h"
#include "memory_svc/store/validation.h"

namespace kvfold::memory {

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

MemoryStore::MemoryStore(StoreOptions options, std::unique_ptr<Impl> impl)
    : options_(std::move(options)), impl_(std::move(impl)) {}

MemoryStore::~MemoryStore() { Close().IgnoreError(); }

absl::StatusOr<std::unique_ptr<MemoryStore>> MemoryStore::Open(StoreOptions options) {
  if (options.db_dir.empty()) return absl::InvalidArgumentError("db_dir is required");
  if (options.versions_kept < 1) return absl::InvalidArgumentError("versions_kept must be >= 1");
  if (options.idle_ttl_seconds < 0) {
    return absl::InvalidArgumentError("idle_ttl_seconds must be >= 0");
  }
  if (options.max_block_bytes == 0) {
    return absl::InvalidArgumentError("max_block_bytes must be > 0");
  }
  if (!options.clock_ms) {
    options.clock_ms = [] { return absl::ToUnixMillis(absl::Now()); };
  }

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
  auto impl = std::make_unique<Impl>();
  rocksdb::Status s =
      rocksdb::DB::Open(db_options, options.db_dir, cfs, &impl->handles, &impl->db);
  if (!s.ok()) return FromRocks(s, absl::StrCat("open ", options.db_dir));
  impl->sessions = impl->handles[1];
  impl->versions = impl->handles[2];
  impl->payloads = impl->handles[3];
  impl->write_options.sync = options.sync_writes;

  std::unique_ptr<MemoryStore> store(new MemoryStore(std::move(options), std::move(impl)));
  if (store->options_.idle_ttl_seconds > 0) {
    int64_t interval_ms = store->options_.sweep_interval_ms;
    if (interval_ms <= 0) {
      interval_ms = std::min<int64_t>(store->options_.idle_ttl_seconds * 500, 60'000);
    }
    MemoryStore* self = store.get();
    store->impl_->sweeper = std::thread([self, interval_ms] {
      Impl& impl = *self->impl_;
      absl::MutexLock lock(&impl.sweep_mu);
      while (!impl.stop_sweeper) {
        impl.sweep_cv.WaitWithTimeout(&impl.sweep_mu, absl::Milliseconds(interval_ms));
        if (impl.stop_sweeper) break;
        impl.sweep_mu.Unlock();
        self->SweepExpiredSessions().IgnoreError();  // retried next period
        impl.sweep_mu.Lock();
      }
    });
  }
  return store;
}

absl::Status MemoryStore::Close() {
  {
    absl::MutexLock lock(&impl_->sweep_mu);
    impl_->stop_sweeper = true;
    impl_->sweep_cv.SignalAll();
  }
  if (impl_->sweeper.joinable()) impl_->sweeper.join();
  absl::WriterMutexLock lock(&impl_->open_mu);
  if (impl_->closed) return absl::OkStatus();
  impl_->closed = true;
  absl::Status status;
  rocksdb::FlushOptions flush;
  flush.wait = true;
  status.Update(FromRocks(impl_->db->Flush(flush, impl_->handles), "flush"));
  status.Update(FromRocks(impl_->db->FlushWAL(/*sync=*/true), "flush WAL"));
  for (rocksdb::ColumnFamilyHandle* h : impl_->handles) {
    status.Update(FromRocks(impl_->db->DestroyColumnFamilyHandle(h), "close column family"));
  }
  impl_->handles.clear();
  status.Update(FromRocks(impl_->db->Close(), "close"));
  delete impl_->db;
  impl_->db = nullptr;
  return status;
}

absl::StatusOr<v1::PutBlockResponse> MemoryStore::Put(absl::string_view tenant,
                                                      absl::string_view session_id,
                                                      uint64_t expected_head_version,
                                                      const v1::MemoryBlockHeader& header,
                                                      absl::string_view payload, bool pin) {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(expected_head_version, "expected_head_version"); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateBlockHeader(header, options_.max_block_bytes); !s.ok()) return s;
  if (payload.size() != header.payload_size()) {
    return absl::InvalidArgumentError(absl::StrCat("payload is ", payload.size(),
                                                   " bytes but header.payload_size is ",
                                                   header.payload_size()));
  }
  const uint64_t checksum = BlockChecksum(header, std::string_view(payload.data(), payload.size()));
  if (checksum != header.checksum()) {
    return absl::DataLossError(absl::StrCat("block checksum mismatch: header says ",
                                            header.checksum(), ", data hashes to ", checksum));
  }
  KVFOLD_STORE_OPEN_OR_RETURN();
  const std::string skey = SessionKey(tenant, session_id);
  absl::MutexLock session_lock(&impl_->StripeFor(skey));
  absl::StatusOr<std::optional<SessionMeta>> old = impl_->ReadMeta(skey, nullptr);
  if (!old.ok()) return old.status();
  const int64_t now = options_.clock_ms();
  const bool stale = old->has_value() && Expired(options_, **old, now);
  const bool exists = old->has_value() && !stale;
  if (!exists && expected_head_version != 0) return SessionNotFound(session_id);
  if (exists && (*old)->head_version != expected_head_version) {
    return absl::AbortedError(absl::StrCat("session '", session_id, "': head is ",
                                           (*old)->head_version, ", expected ",
                                           expected_head_version));
  }
  rocksdb::WriteBatch batch;
  SessionMeta meta;
  if (exists) {
    meta = **old;
  } else {
    meta.created_unix_ms = now;
    if (stale) impl_->DeleteAllVersions(tenant, session_id, &batch);
  }
  const uint64_t version = meta.latest_version + 1;
  meta.latest_version = version;
  meta.head_version = version;
  meta.updated_unix_ms = now;
  meta.total_tokens = header.total_tokens();
  meta.versions.push_back(version);
  if (pin) meta.pinned.push_back(version);
  for (uint64_t victim : RetentionVictims(meta, options_.versions_kept)) {
    const std::string vkey = VersionKey(tenant, session_id, victim);
    batch.Delete(impl_->versions, vkey);
    batch.Delete(impl_->payloads, vkey);
    meta.versions.erase(std::find(meta.versions.begin(), meta.versions.end(), victim));
  }
  const std::string vkey = VersionKey(tenant, session_id, version);
  batch.Put(impl_->versions, vkey, EncodeVersionRecord({now, header}));
  batch.Put(impl_->payloads, vkey, rocksdb::Slice(payload.data(), payload.size()));
  batch.Put(impl_->sessions, skey, EncodeSessionMeta(meta));
  if (absl::Status s = impl_->Write(&batch, "commit version"); !s.ok()) return s;
  v1::PutBlockResponse response;
  response.set_session_id(std::string(session_id));
  response.set_version(version);
  response.set_payload_size(header.payload_size());
  response.set_checksum(header.checksum());
  return response;
}

absl::StatusOr<StoredBlock> MemoryStore::Get(absl::string_view tenant, absl::string_view session_id,
                                             uint64_t version) const {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(version, "version"); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  rocksdb::ManagedSnapshot snapshot(impl_->db);
  absl::StatusOr<std::optional<SessionMeta>> meta =
      impl_->ReadMeta(SessionKey(tenant, session_id), snapshot.snapshot());
  if (!meta.ok()) return meta.status();
  if (!meta->has_value() || Expired(options_, **meta, options_.clock_ms())) {
    return SessionNotFound(session_id);
  }
  const uint64_t v = version == 0 ? (*meta)->head_version : version;
  if (!(*meta)->HasVersion(v)) {
    return absl::NotFoundError(absl::StrCat("session '", session_id, "' has no version ", v,
                                            " (latest ", (*meta)->latest_version, ")"));
  }
  const std::string vkey = VersionKey(tenant, session_id, v);
  absl::StatusOr<VersionRecord> record = impl_->ReadVersionRecord(vkey, snapshot.snapshot());
  if (!record.ok()) return record.status();
  StoredBlock block;
  if (absl::Status s = impl_->ReadPayload(vkey, snapshot.snapshot(), &block.payload); !s.ok()) {
    return s;
  }
  if (block.payload.size() != record->header.payload_size() ||
      BlockChecksum(record->header, block.payload) != record->header.checksum()) {
    return absl::DataLossError(absl::StrCat("session '", session_id, "' version ", v,
                                            ": stored block fails its checksum"));
  }
  block.info = MakeVersionInfo(v, **meta, *record);
  block.header = std::move(record->header);
  return block;
}

absl::StatusOr<v1::SessionInfo> MemoryStore::GetSessionInfo(absl::string_view tenant,
                                                            absl::string_view session_id) const {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  absl::StatusOr<std::optional<SessionMeta>> meta =
      impl_->ReadMeta(SessionKey(tenant, session_id), nullptr);
  if (!meta.ok()) return meta.status();
  if (!meta->has_value() || Expired(options_, **meta, options_.clock_ms())) {
    return SessionNotFound(session_id);
  }
  return MakeSessionInfo(session_id, **meta);
}

absl::StatusOr<v1::ListVersionsResponse> MemoryStore::ListVersions(
    absl::string_view tenant, absl::string_view session_id) const {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  rocksdb::ManagedSnapshot snapshot(impl_->db);
  absl::StatusOr<std::optional<SessionMeta>> meta =
      impl_->ReadMeta(SessionKey(tenant, session_id), snapshot.snapshot());
  if (!meta.ok()) return meta.status();
  if (!meta->has_value() || Expired(options_, **meta, options_.clock_ms())) {
    return SessionNotFound(session_id);
  }
  v1::ListVersionsResponse response;
  *response.mutable_session() = MakeSessionInfo(session_id, **meta);
  for (auto it = (*meta)->versions.rbegin(); it != (*meta)->versions.rend(); ++it) {
    absl::StatusOr<VersionRecord> record =
        impl_->ReadVersionRecord(VersionKey(tenant, session_id, *it), snapshot.snapshot());
    if (!record.ok()) return record.status();
    *response.add_versions() = MakeVersionInfo(*it, **meta, *record);
  }
  return response;
}

}  // namespace kvfold::memory
