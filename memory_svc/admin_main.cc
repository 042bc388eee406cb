// kvfold-memory-admin: offline administration of a memory store.
//
//   kvfold-memory-admin copy --from rocksdb:DIR --to rados:CONF:POOL[:NAMESPACE]
//
// copy: every live session of every tenant, with its version numbers, head, pins and
// times, one atomic commit per session; every block's checksum is verified when read from
// the source, before the commit, and again when read back from the destination. A session
// already in the destination with the same versions and checksums counts as copied (so a
// copy that stopped half-way can be run again); with different content it is an error.
// The source must not be in use (stop its kvfold-memory first). Exit codes: 0 all copied,
// 1 a session or store failed (named on stderr), 2 bad arguments. Flags:
// `kvfold-memory-admin copy --help` (docs/cli.md).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/command_line.h"
#include "memory_svc/store/memory_store.h"

namespace kvfold::memory_svc {
namespace {

struct CopyFlags {
  std::string from;  // rocksdb:DIR or rados:CONF:POOL[:NAMESPACE]
  std::string to;
  RadosOptions rados;  // keyring_file and user apply to both stores when they are rados
};

// "rocksdb:DIR" or "rados:CONF:POOL[:NAMESPACE]" -> options; INVALID_ARGUMENT otherwise.
absl::StatusOr<StoreOptions> ParseStoreSpec(const std::string& spec, const RadosOptions& rados) {
  StoreOptions options;
  options.sync_writes = true;
  const std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts.size() == 2 && parts[0] == "rocksdb" && !parts[1].empty()) {
    options.db_dir = parts[1];
    return options;
  }
  if ((parts.size() == 3 || parts.size() == 4) && parts[0] == "rados" && !parts[1].empty() &&
      !parts[2].empty()) {
    options.backend = BackendKind::kRados;
    options.rados.conf_file = parts[1];
    options.rados.pool = parts[2];
    if (parts.size() == 4) options.rados.name_space = parts[3];
    options.rados.keyring_file = rados.keyring_file;
    options.rados.user = rados.user;
    return options;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "store '", spec, "' is neither rocksdb:DIR nor rados:CONF:POOL[:NAMESPACE]"));
}

// Same version numbers, head, pins and block checksums.
bool SameSession(const SessionExport& a, const SessionExport& b) {
  if (a.info.head_version() != b.info.head_version() ||
      a.info.latest_version() != b.info.latest_version() ||
      a.versions.size() != b.versions.size()) {
    return false;
  }
  for (size_t i = 0; i < a.versions.size(); ++i) {
    const v1::VersionInfo& x = a.versions[i].info;
    const v1::VersionInfo& y = b.versions[i].info;
    if (x.version() != y.version() || x.checksum() != y.checksum() ||
        x.pinned() != y.pinned() || a.versions[i].payload != b.versions[i].payload) {
      return false;
    }
  }
  return true;
}

struct CopyStats {
  int sessions = 0, already = 0;
  uint64_t versions = 0, bytes = 0;
};

absl::Status CopySession(const MemoryStore& from, MemoryStore& to, const std::string& tenant,
                         const std::string& session_id, CopyStats& stats) {
  absl::StatusOr<SessionExport> session = from.ExportSession(tenant, session_id);
  if (!session.ok()) return session.status();
  absl::Status imported = to.ImportSession(tenant, *session);
  if (!imported.ok() && imported.code() != absl::StatusCode::kAlreadyExists) return imported;
  // Read back (checksums verified again) and compare with the source.
  absl::StatusOr<SessionExport> copy = to.ExportSession(tenant, session_id);
  if (!copy.ok()) return copy.status();
  if (!SameSession(*session, *copy)) {
    return absl::AlreadyExistsError(
        "the destination holds a different session under this id");
  }
  ++(imported.ok() ? stats.sessions : stats.already);
  for (const StoredBlock& b : session->versions) {
    ++stats.versions;
    stats.bytes += b.payload.size();
  }
  return absl::OkStatus();
}

int Copy(const CopyFlags& flags) {
  const std::string& from_spec = flags.from;
  const std::string& to_spec = flags.to;
  absl::StatusOr<StoreOptions> from_options = ParseStoreSpec(from_spec, flags.rados);
  absl::StatusOr<StoreOptions> to_options = ParseStoreSpec(to_spec, flags.rados);
  for (const absl::StatusOr<StoreOptions>* o : {&from_options, &to_options}) {
    if (!o->ok()) {
      std::fprintf(stderr, "kvfold-memory-admin: %s\n", o->status().ToString().c_str());
      return kExitUsage;
    }
  }
  // Opening would create an empty RocksDB: a source must be a database already.
  if (from_options->backend == BackendKind::kRocksDb &&
      !std::filesystem::exists(std::filesystem::path(from_options->db_dir) / "CURRENT")) {
    std::fprintf(stderr, "kvfold-memory-admin: %s is not a RocksDB database\n",
                 from_options->db_dir.c_str());
    return kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<MemoryStore>> from = MemoryStore::Open(*from_options);
  absl::StatusOr<std::unique_ptr<MemoryStore>> to =
      from.ok() ? MemoryStore::Open(*to_options) : from.status();
  if (!from.ok() || !to.ok()) {
    std::fprintf(stderr, "kvfold-memory-admin: open %s: %s\n",
                 (from.ok() ? to_spec : from_spec).c_str(),
                 (from.ok() ? to.status() : from.status()).ToString().c_str());
    return kExitFailure;
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> sessions =
      (*from)->ListAllSessions();
  if (!sessions.ok()) {
    std::fprintf(stderr, "kvfold-memory-admin: list %s: %s\n", from_spec.c_str(),
                 sessions.status().ToString().c_str());
    return kExitFailure;
  }
  CopyStats stats;
  int failed = 0;
  for (const auto& [tenant, session_id] : *sessions) {
    if (absl::Status s = CopySession(**from, **to, tenant, session_id, stats); !s.ok()) {
      std::fprintf(stderr, "kvfold-memory-admin: tenant '%s' session '%s': %s\n", tenant.c_str(),
                   session_id.c_str(), s.ToString().c_str());
      ++failed;
    }
  }
  absl::Status closed = (*to)->Close();
  if (!closed.ok()) {
    std::fprintf(stderr, "kvfold-memory-admin: close %s: %s\n", to_spec.c_str(),
                 closed.ToString().c_str());
    ++failed;
  }
  std::printf("copied %d sessions (%llu versions, %llu payload bytes), %d already present, "
              "%d failed\n",
              stats.sessions, static_cast<unsigned long long>(stats.versions),
              static_cast<unsigned long long>(stats.bytes), stats.already, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvfold::memory_svc

int main(int argc, char** argv) {
  CLI::App app{"Offline administration of a kvfold memory store.", "kvfold-memory-admin"};
  kvfold::ApplyConvention(app);
  app.require_subcommand(1);
  kvfold::memory_svc::CopyFlags copy;
  CLI::App* copy_cmd = app.add_subcommand(
      "copy", "copy every session with its versions, pins and times to another store");
  copy_cmd
      ->add_option("--from", copy.from, "source store: rocksdb:DIR or rados:CONF:POOL[:NAMESPACE]")
      ->required();
  copy_cmd->add_option("--to", copy.to, "destination store, same forms as --from")->required();
  copy_cmd->add_option("--ceph-keyring", copy.rados.keyring_file,
                       "rados: keyring file with the user's cephx key");
  copy_cmd->add_option("--ceph-user", copy.rados.user, "rados: cephx user");
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  return kvfold::memory_svc::Copy(copy);
}
