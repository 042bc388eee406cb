// MemoryStore's whole-session export and import (copying a store between backends).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/block_checksum.h"
#include "memory_svc/store/memory_store.h"
#include "memory_svc/store/records.h"
#include "memory_svc/store/store_impl.h"
#include "memory_svc/store/validation.h"

namespace kvfold::memory_svc {

absl::StatusOr<SessionExport> MemoryStore::ExportSession(absl::string_view tenant,
                                                         absl::string_view session_id) const {
  absl::StatusOr<v1::ListVersionsResponse> list = ListVersions(tenant, session_id);
  if (!list.ok()) return list.status();
  SessionExport out;
  out.info = list->session();
  for (int i = list->versions_size() - 1; i >= 0; --i) {
    absl::StatusOr<StoredBlock> block = Get(tenant, session_id, list->versions(i).version());
    if (!block.ok()) return block.status();
    out.versions.push_back(*std::move(block));
  }
  absl::StatusOr<v1::SessionInfo> after = GetSessionInfo(tenant, session_id);
  if (!after.ok()) return after.status();
  if (after->SerializeAsString() != out.info.SerializeAsString()) {
    return absl::AbortedError(
        absl::StrCat("session '", session_id, "' changed while it was exported"));
  }
  return out;
}

absl::Status MemoryStore::ImportSession(absl::string_view tenant, const SessionExport& session) {
  const std::string& session_id = session.info.session_id();
  if (absl::Status s = CheckIds(tenant, session_id); !s.ok()) return s;
  if (session.versions.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("session '", session_id, "' has no versions"));
  }
  SessionMeta meta;
  meta.head_version = session.info.head_version();
  meta.latest_version = session.info.latest_version();
  meta.created_unix_ms = session.info.created_unix_ms();
  meta.updated_unix_ms = session.info.updated_unix_ms();
  meta.total_tokens = session.info.total_tokens();
  SessionCommit commit;
  for (const StoredBlock& block : session.versions) {
    const uint64_t v = block.info.version();
    if (v == 0 || v > meta.latest_version || (!meta.versions.empty() && v <= meta.versions.back())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "session '", session_id, "': version ", v, " is out of order or beyond the latest"));
    }
    if (absl::Status s = ValidateBlockHeader(block.header, options_.max_block_bytes); !s.ok()) {
      return s;
    }
    if (block.payload.size() != block.header.payload_size() ||
        BlockChecksum(block.header, block.payload) != block.header.checksum() ||
        !TurnRecordIntact(block.header)) {
      return absl::DataLossError(
          absl::StrCat("session '", session_id, "' version ", v, " fails its checksum"));
    }
    meta.versions.push_back(v);
    if (block.info.pinned()) meta.pinned.push_back(v);
    commit.new_versions.push_back(
        NewVersion{v, {block.info.created_unix_ms(), block.header}, block.payload});
  }
  if (!meta.HasVersion(meta.head_version)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session '", session_id, "': head ", meta.head_version, " is not among its versions"));
  }
  commit.meta = meta;
  KVFOLD_STORE_OPEN_OR_RETURN();
  absl::StatusOr<std::optional<SessionState>> old = impl_->backend->ReadSession(tenant, session_id);
  if (!old.ok()) return old.status();
  if (old->has_value()) {
    if (!Expired(options_, (*old)->meta, options_.clock_ms())) {
      return absl::AlreadyExistsError(absl::StrCat("session '", session_id, "' already exists"));
    }
    commit.expected_token = (*old)->cas_token;
    commit.drop_all_versions = true;
  }
  absl::StatusOr<bool> committed = impl_->backend->Commit(tenant, session_id, commit);
  if (!committed.ok()) return committed.status();
  if (!*committed) {
    return absl::AbortedError(
        absl::StrCat("session '", session_id, "' was created concurrently"));
  }
  return absl::OkStatus();
}

}  // namespace kvfold::memory_svc
