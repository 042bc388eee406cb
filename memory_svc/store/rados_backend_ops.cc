// RadosBackend: commit, multi-object reads, listing and garbage collection
// (rados_backend.h; layout in rados_layout.h).
#include <cerrno>
#include <ctime>
#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "memory_svc/store/rados_backend.h"
#include "memory_svc/store/rados_layout.h"

namespace kvfold::memory_svc {
namespace {

namespace layout = rados_layout;
using librados::bufferlist;

// Reads that cross objects race concurrent commits (a version retired between reading the
// head and its payload); they start over this often before reporting.
constexpr int kReadAttempts = 8;

absl::Status ReadContention(absl::string_view session_id) {
  return absl::UnavailableError(
      absl::StrCat("session '", session_id, "' changed during every read attempt, retry"));
}

}  // namespace

absl::StatusOr<bool> RadosBackend::Commit(absl::string_view tenant, absl::string_view session_id,
                                          const SessionCommit& commit) {
  const std::string head = layout::HeadObject(tenant, session_id);
  // Payload objects that go once the commit holds: their versions are immutable, so the
  // nonces read now are the ones the commit unlinks.
  std::vector<std::string> doomed;
  absl::StatusOr<std::map<uint64_t, uint64_t>> unlinked = std::map<uint64_t, uint64_t>();
  if (commit.expected_token.has_value() && (commit.drop_all_versions || !commit.meta)) {
    unlinked = ReadAllNonces(tenant, session_id);
  } else if (!commit.retired_versions.empty()) {
    unlinked = ReadNonces(tenant, session_id, std::set<uint64_t>(commit.retired_versions.begin(),
                                                                 commit.retired_versions.end()));
  }
  if (!unlinked.ok()) return unlinked.status();
  for (const auto& [v, nonce] : *unlinked) {
    doomed.push_back(layout::PayloadObject(tenant, session_id, v, nonce));
  }

  // 1. Each new version's payload, in an object of its own (invisible until step 3).
  std::vector<std::string> new_objects;
  std::map<std::string, bufferlist> new_entries;
  for (const NewVersion& v : commit.new_versions) {
    const uint64_t nonce = Nonce();
    new_objects.push_back(layout::PayloadObject(tenant, session_id, v.version, nonce));
    bufferlist bl = RadosBytes(v.payload);
    if (int r = io_.write_full(new_objects.back(), bl); r < 0) {
      return FromRados(r, "write version");
    }
    new_entries[layout::VersionKey(v.version)] =
        RadosBytes(layout::EncodeVersionEntry(nonce, v.record));
  }
  // 2. A new session is listed before it exists (listings skip ids without a head).
  if (!commit.expected_token.has_value()) {
    if (absl::Status s = AddToIndex(tenant, session_id); !s.ok()) return s;
  }
  // 3. The compare-and-set on the head: all of it or nothing.
  librados::ObjectWriteOperation op;
  uint64_t gen = 0;
  if (!commit.expected_token.has_value()) {
    op.create(/*exclusive=*/true);
    // A random first generation: a stale token of a deleted and re-created session
    // cannot match the new one.
    gen = Nonce() >> 2;
  } else {
    uint64_t old = 0;
    if (!absl::SimpleAtoi(*commit.expected_token, &old)) {
      return absl::DataLossError("session head has a malformed generation");
    }
    op.cmpxattr(layout::kGenXattr, LIBRADOS_CMPXATTR_OP_EQ, old);
    gen = old + 1;
  }
  if (!commit.meta.has_value()) {
    op.remove();
  } else {
    if (commit.drop_all_versions) op.omap_clear();
    if (!commit.retired_versions.empty()) {
      std::set<std::string> keys;
      for (uint64_t v : commit.retired_versions) keys.insert(layout::VersionKey(v));
      op.omap_rm_keys(keys);
    }
    if (!new_entries.empty()) op.omap_set(new_entries);
    bufferlist gen_bl = RadosBytes(std::to_string(gen));
    bufferlist meta_bl = RadosBytes(EncodeSessionMeta(*commit.meta));
    op.setxattr(layout::kGenXattr, gen_bl);
    op.setxattr(layout::kMetaXattr, meta_bl);
  }
  const int r = io_.operate(head, &op);
  if (r == -ECANCELED || r == -EEXIST || r == -ENOENT) {
    // Lost the compare-and-set: nothing references the new objects.
    RemoveObjects(new_objects);
    return false;
  }
  // On a timeout the outcome is unknown: the new objects stay; if the commit did not hold,
  // the collector removes it after the grace period.
  if (r < 0) return FromRados(r, "commit session head");
  RemoveObjects(doomed);
  if (!commit.meta.has_value()) RemoveFromIndex(tenant, session_id);
  return true;
}

absl::StatusOr<std::optional<BlockRead>> RadosBackend::ReadBlock(
    absl::string_view tenant, absl::string_view session_id, uint64_t version, bool with_payload,
    const PayloadGate& before_payload) const {
  const std::string head = layout::HeadObject(tenant, session_id);
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    // The head's attributes and (when the version is known) its entry in one operation.
    librados::ObjectReadOperation op;
    std::map<std::string, bufferlist> attrs, vals;
    int attrs_rval = 0, vals_rval = 0;
    op.getxattrs(&attrs, &attrs_rval);
    if (version != 0) op.omap_get_vals_by_keys({layout::VersionKey(version)}, &vals, &vals_rval);
    int r = io_.operate(head, &op, nullptr);
    if (r == -ENOENT) return std::optional<BlockRead>();
    if (r < 0) return FromRados(r, "read session head");
    absl::StatusOr<std::optional<SessionState>> state = DecodeHead(attrs);
    if (!state.ok()) return state.status();
    BlockRead read;
    read.meta = std::move((*state)->meta);
    read.version = version == 0 ? read.meta.head_version : version;
    if (!read.meta.HasVersion(read.version)) return std::optional<BlockRead>(std::move(read));
    if (version == 0) {
      r = io_.omap_get_vals_by_keys(head, {layout::VersionKey(read.version)}, &vals);
      if (r == -ENOENT) continue;  // deleted meanwhile
      if (r < 0) return FromRados(r, "read version entry");
    }
    auto it = vals.find(layout::VersionKey(read.version));
    if (it == vals.end()) {
      // Read with the record in one operation: the record lists a version without entry.
      if (version != 0) return absl::DataLossError("version entry missing");
      continue;  // the head moved on and retired it between the two reads
    }
    absl::StatusOr<layout::VersionEntry> entry = layout::DecodeVersionEntry(RadosView(it->second));
    if (!entry.ok()) return entry.status();
    if (with_payload) {
      if (before_payload) {
        if (absl::Status s = before_payload(entry->record.header); !s.ok()) return s;
      }
      bufferlist bl;
      const std::string oid =
          layout::PayloadObject(tenant, session_id, read.version, entry->nonce);
      r = io_.read(oid, bl, entry->record.header.payload_size(), 0);
      if (r == -ENOENT) {
        absl::StatusOr<std::map<uint64_t, uint64_t>> now =
            ReadNonces(tenant, session_id, {read.version});
        if (!now.ok()) return now.status();
        auto still = now->find(read.version);
        if (still != now->end() && still->second == entry->nonce) {
          return absl::DataLossError("payload object missing");
        }
        continue;  // retired between the reads
      }
      if (r < 0) return FromRados(r, "read payload");
      read.payload.clear();
      bl.begin().copy(bl.length(), read.payload);
    }
    read.record = std::move(entry->record);
    return std::optional<BlockRead>(std::move(read));
  }
  return ReadContention(session_id);
}

absl::StatusOr<std::optional<std::pair<SessionMeta, std::vector<VersionRecord>>>>
RadosBackend::ReadVersionRecords(absl::string_view tenant, absl::string_view session_id) const {
  using Result = std::optional<std::pair<SessionMeta, std::vector<VersionRecord>>>;
  const std::string head = layout::HeadObject(tenant, session_id);
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    absl::StatusOr<std::optional<SessionState>> state = ReadSession(tenant, session_id);
    if (!state.ok()) return state.status();
    if (!state->has_value()) return Result();
    const SessionMeta& meta = (*state)->meta;
    std::set<std::string> keys;
    for (uint64_t v : meta.versions) keys.insert(layout::VersionKey(v));
    std::map<std::string, bufferlist> vals;
    const int r = io_.omap_get_vals_by_keys(head, keys, &vals);
    if (r == -ENOENT) continue;
    if (r < 0) return FromRados(r, "read version entries");
    std::vector<VersionRecord> records;
    for (uint64_t v : meta.versions) {
      auto it = vals.find(layout::VersionKey(v));
      if (it == vals.end()) break;  // retired since the head was read
      absl::StatusOr<layout::VersionEntry> entry =
          layout::DecodeVersionEntry(RadosView(it->second));
      if (!entry.ok()) return entry.status();
      records.push_back(std::move(entry->record));
    }
    if (records.size() != meta.versions.size()) continue;
    return Result(std::make_pair(std::move((*state)->meta), std::move(records)));
  }
  return ReadContention(session_id);
}

absl::StatusOr<std::vector<std::pair<std::string, SessionMeta>>> RadosBackend::ScanSessions(
    absl::string_view tenant, absl::string_view after, uint32_t limit) const {
  std::vector<std::pair<std::string, SessionMeta>> out;
  std::string cursor(after);
  while (out.size() < limit) {
    std::set<std::string> ids;
    bool more = false;
    const int r =
        io_.omap_get_keys2(layout::IndexObject(tenant), cursor, limit - out.size(), &ids, &more);
    if (r == -ENOENT) break;
    if (r < 0) return FromRados(r, "list sessions");
    for (const std::string& id : ids) {
      absl::StatusOr<std::optional<SessionState>> state = ReadSession(tenant, id);
      if (!state.ok()) return state.status();
      if (state->has_value()) out.emplace_back(id, std::move((*state)->meta));
    }
    if (!more || ids.empty()) break;
    cursor = *ids.rbegin();
  }
  return out;
}

absl::StatusOr<std::vector<StoreBackend::SessionEntry>> RadosBackend::ScanAllSessions() const {
  constexpr uint32_t kBatch = 1000;
  std::vector<SessionEntry> out;
  std::string tenant_cursor;
  bool more_tenants = true;
  while (more_tenants) {
    std::set<std::string> tenants;
    const int r =
        io_.omap_get_keys2(layout::kTenantsObject, tenant_cursor, kBatch, &tenants, &more_tenants);
    if (r == -ENOENT) break;
    if (r < 0) return FromRados(r, "list tenants");
    for (const std::string& tenant : tenants) {
      std::string after;
      while (true) {
        auto batch = ScanSessions(tenant, after, kBatch);
        if (!batch.ok()) return batch.status();
        for (auto& [id, meta] : *batch) out.push_back({tenant, id, std::move(meta)});
        if (batch->size() < kBatch) break;
        after = batch->back().first;
      }
    }
    if (tenants.empty()) break;
    tenant_cursor = *tenants.rbegin();
  }
  return out;
}

absl::StatusOr<int> RadosBackend::CollectGarbage(int64_t grace_ms) {
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  int removed = 0;
  try {
    for (auto it = io_.nobjects_begin(); it != io_.nobjects_end(); ++it) {
      const std::string& oid = it->get_oid();
      std::optional<layout::PayloadName> name = layout::ParsePayloadObject(oid);
      if (!name.has_value()) continue;
      absl::StatusOr<std::map<uint64_t, uint64_t>> linked =
          ReadNonces(name->tenant, name->session_id, {name->version});
      if (!linked.ok()) continue;  // tried again next round
      auto found = linked->find(name->version);
      if (found != linked->end() && found->second == name->nonce) continue;  // committed
      uint64_t size = 0;
      struct timespec mtime = {};
      if (io_.stat2(oid, &size, &mtime) < 0) continue;
      const int64_t age_ms = now_ms - (static_cast<int64_t>(mtime.tv_sec) * 1000 +
                                       mtime.tv_nsec / 1'000'000);
      if (age_ms < grace_ms) continue;  // its writer may still be about to commit it
      if (io_.remove(oid) == 0) ++removed;
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rados: listing the pool failed: ", e.what()));
  }
  return removed;
}

}  // namespace kvfold::memory_svc
