// kvfold-memory: the durable, versioned memory-block store (MemoryStore over gRPC).
//
//   kvfold-memory --db_dir /var/lib/kvfold-memory [--listen 127.0.0.1:7070]
//   kvfold-memory --backend rados --ceph_conf /etc/ceph/ceph.conf --pool kvfold
//
// Prints "kvfold-memory listening on HOST:PORT" once serving (with --listen HOST:0 the
// chosen port). SIGTERM/SIGINT: stop accepting, drain in-flight calls (--drain_seconds),
// flush and close the DB, exit 0. SIGHUP: reload the tokens file.
// Without --tokens_file it refuses to start unless --insecure_no_auth is given; on a port
// already in use it exits 1 (the port is never shared).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "memory_svc/service/server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070", "host:port to serve on (port 0: any free port)");
ABSL_FLAG(std::string, backend, "rocksdb", "where records live: rocksdb (embedded) or rados");
ABSL_FLAG(std::string, db_dir, "", "RocksDB directory (created if missing); required for rocksdb");
ABSL_FLAG(std::string, ceph_conf, "", "rados: ceph.conf with the monitors; required for rados");
ABSL_FLAG(std::string, ceph_keyring, "", "rados: keyring file with the user's cephx key");
ABSL_FLAG(std::string, ceph_user, "client.admin", "rados: cephx user");
ABSL_FLAG(std::string, pool, "", "rados: pool holding the store; required for rados");
ABSL_FLAG(std::string, rados_namespace, "", "rados: namespace inside the pool");
ABSL_FLAG(int64_t, orphan_grace_seconds, 600,
          "rados: age after which an uncommitted version object is garbage-collected");
ABSL_FLAG(bool, sync_writes, true, "fsync the WAL before acknowledging a write");
ABSL_FLAG(uint32_t, versions_kept, 16, "newest versions kept per session (plus pinned ones)");
ABSL_FLAG(int64_t, idle_ttl_seconds, 0, "expire sessions not written for this long; 0 = off");
ABSL_FLAG(uint64_t, max_block_bytes, 64ull << 20,
          "largest block accepted (serialized header + payload), bytes");
ABSL_FLAG(bool, blob_files, true, "store payloads in RocksDB blob files (BlobDB)");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate (enables TLS with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM server private key");
ABSL_FLAG(std::string, tls_client_ca, "", "PEM CA for client certificates (enables mTLS)");
ABSL_FLAG(std::string, tokens_file, "",
          "'<token> <tenant>' lines; reloaded on SIGHUP and when the file changes");
ABSL_FLAG(std::string, tenants_file, "",
          "per-tenant quotas: '<tenant|*> [sessions=N] [versions=N] [bytes=N[K|M|G]]' lines; "
          "reloaded on SIGHUP");
ABSL_FLAG(bool, insecure_no_auth, false,
          "serve without a tokens file: every caller is tenant 'default' (development only)");
ABSL_FLAG(int, metrics_port, 0, "HTTP port for /metrics (Prometheus text); 0 = off");
ABSL_FLAG(int, drain_seconds, 10, "on SIGTERM, how long in-flight calls may finish");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kvfold-memory --db_dir DIR [--listen HOST:PORT] [flags]");
  absl::ParseCommandLine(argc, argv);

  // Block the signals before any thread starts so that every thread inherits the mask and
  // only sigwait() below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  kvfold::memory::ServerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend != "rocksdb" && backend != "rados") {
    std::fprintf(stderr, "kvfold-memory: --backend must be rocksdb or rados, not '%s'\n",
                 backend.c_str());
    return 2;
  }
  config.store.backend = backend == "rados" ? kvfold::memory::BackendKind::kRados
                                            : kvfold::memory::BackendKind::kRocksDb;
  config.store.db_dir = absl::GetFlag(FLAGS_db_dir);
  config.store.rados.conf_file = absl::GetFlag(FLAGS_ceph_conf);
  config.store.rados.keyring_file = absl::GetFlag(FLAGS_ceph_keyring);
  config.store.rados.user = absl::GetFlag(FLAGS_ceph_user);
  config.store.rados.pool = absl::GetFlag(FLAGS_pool);
  config.store.rados.name_space = absl::GetFlag(FLAGS_rados_namespace);
  config.store.orphan_grace_seconds = absl::GetFlag(FLAGS_orphan_grace_seconds);
  config.store.sync_writes = absl::GetFlag(FLAGS_sync_writes);
  config.store.versions_kept = absl::GetFlag(FLAGS_versions_kept);
  config.store.idle_ttl_seconds = absl::GetFlag(FLAGS_idle_ttl_seconds);
  config.store.max_block_bytes = absl::GetFlag(FLAGS_max_block_bytes);
  config.store.enable_blob_files = absl::GetFlag(FLAGS_blob_files);
  config.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  config.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  config.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  config.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  config.insecure_no_auth = absl::GetFlag(FLAGS_insecure_no_auth);
  config.tenants_file = absl::GetFlag(FLAGS_tenants_file);
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (backend == "rocksdb" && config.store.db_dir.empty()) {
    std::fprintf(stderr, "kvfold-memory: --db_dir is required\n");
    return 2;
  }
  if (backend == "rados" &&
      (config.store.rados.conf_file.empty() || config.store.rados.pool.empty())) {
    std::fprintf(stderr, "kvfold-memory: --backend rados needs --ceph_conf and --pool\n");
    return 2;
  }
  if (config.metrics_port < 0) {
    std::fprintf(stderr, "kvfold-memory: --metrics_port must be >= 0\n");
    return 2;
  }

  absl::StatusOr<std::unique_ptr<kvfold::memory::MemoryServer>> server =
      kvfold::memory::MemoryServer::Start(config);
  if (!server.ok()) {
    std::fprintf(stderr, "kvfold-memory: %s\n", server.status().ToString().c_str());
    // Bad flags or unreadable config files are usage errors (2); a DB or port that
    // cannot be opened is a runtime failure (1).
    const absl::StatusCode code = server.status().code();
    return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ||
                   code == absl::StatusCode::kFailedPrecondition
               ? 2
               : 1;
  }
  std::printf("kvfold-memory listening on %s\n", (*server)->address().c_str());
  if ((*server)->metrics_port() != 0) {
    std::printf("kvfold-memory metrics on :%d/metrics\n", (*server)->metrics_port());
  }
  std::fflush(stdout);

  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) {
    const absl::Status reloaded = (*server)->ReloadAuth();
    std::fprintf(stderr, "kvfold-memory: SIGHUP: tokens and tenants %s\n",
                 reloaded.ok() ? "reloaded" : reloaded.ToString().c_str());
  }
  std::fprintf(stderr, "kvfold-memory: signal %d, draining\n", signal_number);
  const absl::Status closed =
      (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_seconds)));
  if (!closed.ok()) {
    std::fprintf(stderr, "kvfold-memory: close: %s\n", closed.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "kvfold-memory: stopped cleanly\n");
  return 0;
}
