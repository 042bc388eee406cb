// kvfold-memory: the durable, versioned memory-block store (MemoryStore over gRPC).
//
//   kvfold-memory --db-dir /var/lib/kvfold-memory [--listen 127.0.0.1:7070]
//   kvfold-memory --backend rados --ceph-conf /etc/ceph/ceph.conf --pool kvfold
//
// Prints "kvfold-memory listening on HOST:PORT" once serving (with --listen HOST:0 the
// chosen port). SIGTERM/SIGINT: stop accepting, drain in-flight calls (--drain-seconds),
// flush and close the DB, exit 0. SIGHUP: reload the tokens file.
// Without --tokens-file it refuses to start unless --insecure-no-auth is given; on a port
// already in use it exits 1 (the port is never shared). Flags: `kvfold-memory --help`
// (docs/cli.md); `--config FILE` reads them from a file.

#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/daemon_signals.h"
#include "memory_svc/service/server.h"

namespace {

// The flags, bound to the config structs (their field comments are the reference).
struct Flags {
  kvfold::memory_svc::ServerConfig config;
  std::string backend = "rocksdb";
  int drain_seconds = 10;
  double stream_idle_seconds = 30;
};

void AddFlags(CLI::App& app, Flags& f) {
  kvfold::memory_svc::ServerConfig& c = f.config;
  kvfold::AddConfigFileFlag(app);
  app.add_option("--listen", c.listen, "host:port to serve on (port 0: any free port)");
  app.add_option("--backend", f.backend, "where records live: rocksdb (embedded) or rados")
      ->check(CLI::IsMember({"rocksdb", "rados"}));
  app.add_option("--db-dir", c.store.db_dir,
                 "RocksDB directory (created if missing); required for rocksdb");
  app.add_option("--ceph-conf", c.store.rados.conf_file,
                 "rados: ceph.conf with the monitors; required for rados");
  app.add_option("--ceph-keyring", c.store.rados.keyring_file,
                 "rados: keyring file with the user's cephx key");
  app.add_option("--ceph-user", c.store.rados.user, "rados: cephx user");
  app.add_option("--pool", c.store.rados.pool, "rados: pool holding the store; required for rados");
  app.add_option("--rados-namespace", c.store.rados.name_space, "rados: namespace inside the pool");
  app.add_option("--orphan-grace-seconds", c.store.orphan_grace_seconds,
                 "rados: age after which an uncommitted version object is garbage-collected");
  kvfold::AddSwitch(app, "--sync-writes", c.store.sync_writes,
                    "fsync the WAL before acknowledging a write");
  app.add_option("--versions-kept", c.store.versions_kept,
                 "newest versions kept per session (plus pinned ones)");
  app.add_option("--idle-ttl-seconds", c.store.idle_ttl_seconds,
                 "expire sessions not written for this long; 0 = off");
  app.add_option("--max-block-bytes", c.store.max_block_bytes,
                 "largest block accepted (serialized header + payload), bytes");
  kvfold::AddSwitch(app, "--blob-files", c.store.enable_blob_files,
                    "store payloads in RocksDB blob files (BlobDB)");
  kvfold::AddServerAccessFlags(app, {&c.tls_cert_file, &c.tls_key_file, &c.tls_client_ca_file,
                                     &c.tokens_file, &c.insecure_no_auth});
  app.add_option("--tenants-file", c.tenants_file,
                 "per-tenant quotas: '<tenant|*> [sessions=N] [versions=N] [bytes=N[K|M|G]]' "
                 "lines; reloaded on SIGHUP and when the file changes");
  app.add_option("--metrics-port", c.metrics_port,
                 "HTTP port on all interfaces for /metrics (Prometheus text), /readyz and "
                 "/livez; 0 = off")
      ->check(kvfold::NonNegative());
  app.add_option("--transfer-bytes", c.transfers.total_bytes,
                 "block bytes all PutBlock / GetBlock calls in flight may hold together")
      ->check(kvfold::Positive());
  app.add_option("--tenant-transfer-bytes", c.transfers.tenant_bytes,
                 "block bytes one tenant's calls in flight may hold together (at most "
                 "--transfer-bytes)")
      ->check(kvfold::Positive());
  app.add_option("--stream-idle-seconds", f.stream_idle_seconds,
                 "cancel a PutBlock / GetBlock stream whose client moves nothing this long; "
                 "0 = never")
      ->check(kvfold::NonNegative());
  app.add_option("--max-call-threads", c.max_call_threads,
                 "threads that run calls; a call beyond them is RESOURCE_EXHAUSTED")
      ->check(kvfold::AtLeast(2));
  app.add_option("--drain-seconds", f.drain_seconds,
                 "on SIGTERM, how long in-flight calls may finish");
  app.add_option("--log-level", c.log_level, "request logs: debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kvfold-memory: the durable, versioned memory-block store (MemoryStore over "
      "gRPC).",
      "kvfold-memory"};
  kvfold::ApplyConvention(app);
  Flags flags;
  AddFlags(app, flags);
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;

  const kvfold::DaemonSignals signals;  // before any thread starts

  kvfold::memory_svc::ServerConfig& config = flags.config;
  config.stream_idle_timeout = absl::Seconds(flags.stream_idle_seconds);
  const std::string& backend = flags.backend;
  config.store.backend = backend == "rados" ? kvfold::memory_svc::BackendKind::kRados
                                            : kvfold::memory_svc::BackendKind::kRocksDb;
  if (backend == "rocksdb" && config.store.db_dir.empty()) {
    std::fprintf(stderr, "kvfold-memory: --db-dir is required\n");
    return kvfold::kExitUsage;
  }
  if (backend == "rados" &&
      (config.store.rados.conf_file.empty() || config.store.rados.pool.empty())) {
    std::fprintf(stderr, "kvfold-memory: --backend rados needs --ceph-conf and --pool\n");
    return kvfold::kExitUsage;
  }

  absl::StatusOr<std::unique_ptr<kvfold::memory_svc::MemoryServer>> server =
      kvfold::memory_svc::MemoryServer::Start(config);
  if (!server.ok()) {
    std::fprintf(stderr, "kvfold-memory: %s\n", server.status().ToString().c_str());
    // Bad flags or unreadable config files are usage errors (2); a DB or port that
    // cannot be opened is a runtime failure (1).
    const absl::StatusCode code = server.status().code();
    return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ||
                   code == absl::StatusCode::kFailedPrecondition
               ? kvfold::kExitUsage
               : kvfold::kExitFailure;
  }
  std::printf("kvfold-memory listening on %s\n", (*server)->address().c_str());
  if ((*server)->metrics_port() != 0) {
    std::printf("kvfold-memory metrics on :%d/metrics\n", (*server)->metrics_port());
  }
  std::fflush(stdout);

  const int signal_number = signals.WaitForStop([&] {
    const absl::Status reloaded = (*server)->ReloadAuth();
    std::fprintf(stderr, "kvfold-memory: SIGHUP: tokens and tenants %s\n",
                 reloaded.ok() ? "reloaded" : reloaded.ToString().c_str());
  });
  std::fprintf(stderr, "kvfold-memory: signal %d, draining\n", signal_number);
  const absl::Status closed = (*server)->Shutdown(absl::Seconds(flags.drain_seconds));
  if (!closed.ok()) {
    std::fprintf(stderr, "kvfold-memory: close: %s\n", closed.ToString().c_str());
    return kvfold::kExitFailure;
  }
  std::fprintf(stderr, "kvfold-memory: stopped cleanly\n");
  return 0;
}
