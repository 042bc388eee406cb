// MemoryStore's session administration: roll back, pin, fork, delete, list, TTL sweep.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/block_checksum.h"
#include "memory_svc/store/memory_store.h"
#include "memory_svc/store/records.h"
#include "memory_svc/store/store_impl.h"
#include "memory_svc/store/validation.h"

namespace kvfold::memory {

absl::StatusOr<v1::SessionInfo> MemoryStore::SetHead(absl::string_view tenant,
                                                     absl::string_view session_id,
                                                     uint64_t version,
                                                     uint64_t expected_head_version) {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(version, "version"); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(expected_head_version, "expected_head_version"); !s.ok()) {
    return s;
  }
  if (version == 0) return absl::InvalidArgumentError("SetHead needs a version >= 1");
  KVFOLD_STORE_OPEN_OR_RETURN();
  const std::string skey = SessionKey(tenant, session_id);
  absl::MutexLock session_lock(&impl_->StripeFor(skey));
  absl::StatusOr<std::optional<SessionMeta>> meta = impl_->ReadMeta(skey, nullptr);
  if (!meta.ok()) return meta.status();
  const int64_t now = options_.clock_ms();
  if (!meta->has_value() || Expired(options_, **meta, now)) return SessionNotFound(session_id);
  SessionMeta& m = **meta;
  if (expected_head_version != 0 && m.head_version != expected_head_version) {
    return absl::AbortedError(absl::StrCat("session '", session_id, "': head is ",
                                           m.head_version, ", expected ",
                                           expected_head_version));
  }
  if (!m.HasVersion(version)) {
    return absl::NotFoundError(
        absl::StrCat("session '", session_id, "' has no version ", version));
  }
  absl::StatusOr<VersionRecord> record =
      impl_->ReadVersionRecord(VersionKey(tenant, session_id, version), nullptr);
  if (!record.ok()) return record.status();
  m.head_version = version;
  m.total_tokens = record->header.total_tokens();
  m.updated_unix_ms = now;
  rocksdb::WriteBatch batch;
  batch.Put(impl_->sessions, skey, EncodeSessionMeta(m));
  if (absl::Status s = impl_->Write(&batch, "set head"); !s.ok()) return s;
  return MakeSessionInfo(session_id, m);
}

absl::StatusOr<v1::VersionInfo> MemoryStore::PinVersion(absl::string_view tenant,
                                                        absl::string_view session_id,
                                                        uint64_t version, bool pinned) {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (absl::Status s = ValidateVersion(version, "version"); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  const std::string skey = SessionKey(tenant, session_id);
  absl::MutexLock session_lock(&impl_->StripeFor(skey));
  absl::StatusOr<std::optional<SessionMeta>> meta = impl_->ReadMeta(skey, nullptr);
  if (!meta.ok()) return meta.status();
  const int64_t now = options_.clock_ms();
  if (!meta->has_value() || Expired(options_, **meta, now)) return SessionNotFound(session_id);
  SessionMeta& m = **meta;
  const uint64_t v = version == 0 ? m.head_version : version;
  if (!m.HasVersion(v)) {
    return absl::NotFoundError(absl::StrCat("session '", session_id, "' has no version ", v));
  }
  absl::StatusOr<VersionRecord> record =
      impl_->ReadVersionRecord(VersionKey(tenant, session_id, v), nullptr);
  if (!record.ok()) return record.status();
  auto it = std::lower_bound(m.pinned.begin(), m.pinned.end(), v);
  const bool was_pinned = it != m.pinned.end() && *it == v;
  if (pinned && !was_pinned) m.pinned.insert(it, v);
  if (!pinned && was_pinned) m.pinned.erase(it);
  m.updated_unix_ms = now;
  rocksdb::WriteBatch batch;
  batch.Put(impl_->sessions, skey, EncodeSessionMeta(m));
  if (absl::Status s = impl_->Write(&batch, "pin version"); !s.ok()) return s;
  return MakeVersionInfo(v, m, *record);
}

absl::StatusOr<v1::SessionInfo> MemoryStore::Fork(absl::string_view tenant,
                                                  absl::string_view source_session_id,
                                                  uint64_t version,
                                                  absl::string_view new_session_id) {
  if (absl::Status s = CheckIds(tenant, new_session_id); !s.ok()) return s;
  // Get() validates the source id and version and verifies the checksum, so a damaged
  // block is never copied.
  absl::StatusOr<StoredBlock> source = Get(tenant, source_session_id, version);
  if (!source.ok()) return source.status();
  KVFOLD_STORE_OPEN_OR_RETURN();
  const std::string skey = SessionKey(tenant, new_session_id);
  absl::MutexLock session_lock(&impl_->StripeFor(skey));
  absl::StatusOr<std::optional<SessionMeta>> old = impl_->ReadMeta(skey, nullptr);
  if (!old.ok()) return old.status();
  const int64_t now = options_.clock_ms();
  rocksdb::WriteBatch batch;
  if (old->has_value()) {
    if (!Expired(options_, **old, now)) {
      return absl::AlreadyExistsError(
          absl::StrCat("session '", new_session_id, "' already exists"));
    }
    impl_->DeleteAllVersions(tenant, new_session_id, &batch);
  }
  SessionMeta meta;
  meta.head_version = 1;
  meta.latest_version = 1;
  meta.created_unix_ms = now;
  meta.updated_unix_ms = now;
  meta.total_tokens = source->header.total_tokens();
  meta.versions = {1};
  const std::string vkey = VersionKey(tenant, new_session_id, 1);
  batch.Put(impl_->versions, vkey, EncodeVersionRecord({now, source->header}));
  batch.Put(impl_->payloads, vkey, source->payload);
  batch.Put(impl_->sessions, skey, EncodeSessionMeta(meta));
  if (absl::Status s = impl_->Write(&batch, "fork session"); !s.ok()) return s;
  return MakeSessionInfo(new_session_id, meta);
}

absl::StatusOr<uint32_t> MemoryStore::Delete(absl::string_view tenant,
                                             absl::string_view session_id) {
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  KVFOLD_STORE_OPEN_OR_RETURN();
  const std::string skey = SessionKey(tenant, session_id);
  uint32_t deleted = 0;
  {
    absl::MutexLock session_lock(&impl_->StripeFor(skey));
    absl::StatusOr<std::optional<SessionMeta>> meta = impl_->ReadMeta(skey, nullptr);
    if (!meta.ok()) return meta.status();
    if (!meta->has_value()) return SessionNotFound(session_id);
    const bool expired = Expired(options_, **meta, options_.clock_ms());
    if (absl::Status s = impl_->DeleteSessionLocked(tenant, session_id); !s.ok()) return s;
    if (expired) return SessionNotFound(session_id);  // gone already as far as callers know
    deleted = static_cast<uint32_t>((*meta)->versions.size());
  }
  if (absl::Status s = impl_->CompactSession(tenant, session_id); !s.ok()) return s;
  return deleted;
}

absl::StatusOr<SessionPage> MemoryStore::ListSessions(absl::string_view tenant,
                                                      uint32_t page_size,
                                                      absl::string_view page_token) const {
  if (absl::Status s = ValidateTenant(tenant); !s.ok()) return s;
  if (page_size < 1 || page_size > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size ", page_size, " is outside 1..1000"));
  }
  if (!page_token.empty()) {
    if (absl::Status s = ValidateSessionId(page_token); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("page_token is invalid: ", s.message()));
    }
  }
  KVFOLD_STORE_OPEN_OR_RETURN();
  const std::string prefix = TenantPrefix(tenant);
  const int64_t now = options_.clock_ms();
  rocksdb::ReadOptions ro;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(ro, impl_->sessions));
  const std::string start = prefix + std::string(page_token);
  SessionPage page;
  for (it->Seek(start); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (!key.starts_with(prefix)) break;
    absl::string_view session_id(key.data() + prefix.size(), key.size() - prefix.size());
    if (!page_token.empty() && session_id == page_token) continue;  // strictly after
    absl::StatusOr<SessionMeta> meta =
        DecodeSessionMeta(absl::string_view(it->value().data(), it->value().size()));
    if (!meta.ok()) return meta.status();
    if (Expired(options_, *meta, now)) continue;
    if (page.sessions.size() == page_size) {
      page.next_page_token = page.sessions.back().session_id();
      break;
    }
    page.sessions.push_back(MakeSessionInfo(session_id, *meta));
  }
  if (absl::Status s = FromRocks(it->status(), "list sessions"); !s.ok()) return s;
  return page;
}

absl::StatusOr<int> MemoryStore::SweepExpiredSessions() {
  if (options_.idle_ttl_seconds <= 0) return 0;
  std::vector<std::pair<std::string, std::string>> expired;  // (tenant, session id)
  {
    KVFOLD_STORE_OPEN_OR_RETURN();
    const int64_t now = options_.clock_ms();
    std::unique_ptr<rocksdb::Iterator> it(
        impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->sessions));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      absl::StatusOr<SessionMeta> meta =
          DecodeSessionMeta(absl::string_view(it->value().data(), it->value().size()));
      if (!meta.ok() || !Expired(options_, *meta, now)) continue;
      const absl::string_view key(it->key().data(), it->key().size());
      const size_t sep = key.find('\0');
      if (sep == absl::string_view::npos) continue;
      expired.emplace_back(std::string(key.substr(0, sep)), std::string(key.substr(sep + 1)));
    }
    if (absl::Status s = FromRocks(it->status(), "sweep"); !s.ok()) return s;
  }
  int swept = 0;
  for (const auto& [tenant, session_id] : expired) {
    KVFOLD_STORE_OPEN_OR_RETURN();
    const std::string skey = SessionKey(tenant, session_id);
    {
      absl::MutexLock session_lock(&impl_->StripeFor(skey));
      // Re-check under the lock: the session may have been rewritten since the scan.
      absl::StatusOr<std::optional<SessionMeta>> meta = impl_->ReadMeta(skey, nullptr);
      if (!meta.ok()) return meta.status();
      if (!meta->has_value() || !Expired(options_, **meta, options_.clock_ms())) continue;
      if (absl::Status s = impl_->DeleteSessionLocked(tenant, session_id); !s.ok()) return s;
    }
    if (absl::Status s = impl_->CompactSession(tenant, session_id); !s.ok()) return s;
    ++swept;
  }
  return swept;
}

absl::Status MemoryStore::CorruptPayloadForTesting(absl::string_view tenant,
                                                   absl::string_view session_id,
                                                   uint64_t version) {
  KVFOLD_STORE_OPEN_OR_RETURN();
  const std::string vkey = VersionKey(tenant, session_id, version);
  std::string payload;
  if (absl::Status s = impl_->ReadPayload(vkey, nullptr, &payload); !s.ok()) return s;
  if (payload.empty()) return absl::FailedPreconditionError("empty payload");
  payload[payload.size() / 2] ^= 0x01;
  return FromRocks(impl_->db->Put(impl_->write_options, impl_->payloads, vkey, payload),
                   "corrupt payload");
}

}  // namespace kvfold::memory
