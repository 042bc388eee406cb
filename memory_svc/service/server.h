// MemoryServer: kvfold-memory's process-level wiring, shared by main.cc and the tests.
// Opens the store, then starts gRPC (MemoryStore service, standard health checking,
// server reflection, optional TLS/mTLS, optional bearer-token auth) and the metrics port.
// Health reports SERVING only after the DB is open, NOT_SERVING once draining starts.
// Every call writes one request-log line (method, tenant, session, version, status,
// duration, trace id; never tokens or payloads).
#ifndef KVFOLD_MEMORY_SVC_SERVICE_SERVER_H_
#define KVFOLD_MEMORY_SVC_SERVICE_SERVER_H_

#include <grpcpp/server.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/file_watcher.h"
#include "common/grpc_request_log.h"
#include "common/metrics_http.h"
#include "common/request_log.h"
#include "memory_svc/service/memory_service.h"
#include "memory_svc/service/metrics.h"
#include "memory_svc/service/stream_watchdog.h"
#include "memory_svc/service/tenant_quotas.h"
#include "memory_svc/service/transfer_budget.h"
#include "memory_svc/store/memory_store.h"

namespace kvfold::memory_svc {

struct ServerConfig {
  // host:port to listen on; port 0 picks a free port. Default: 127.0.0.1:7070.
  std::string listen = "127.0.0.1:7070";
  StoreOptions store;
  // PEM files. With cert and key the port is TLS; with a client CA too, clients must
  // present a certificate signed by it (mTLS). All empty = plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // "<token> <tenant>" lines (common/auth.h), reloaded by ReloadAuth() and when the file
  // changes. Required unless insecure_no_auth.
  std::string tokens_file;
  // Serve without authentication: every caller is the tenant "default". Start() refuses a
  // config with neither a tokens file nor this. Default: false.
  bool insecure_no_auth = false;
  // Per-tenant limits (tenant_quotas.h), reloaded by ReloadAuth() and when the file
  // changes. Empty = no limits.
  std::string tenants_file;
  // How often the tokens and tenants files are checked for changes. Default: 1 s.
  absl::Duration tokens_watch_period = absl::Seconds(1);
  // HTTP port on all interfaces for /metrics, /readyz (200 while serving, 503 once
  // draining) and /livez; 0 = off, -1 = any free port (tests).
  int metrics_port = 0;
  // Bytes of blocks the transfers in flight may hold, in all and per tenant, and how long a
  // transfer waits for room (transfer_budget.h). Start() refuses limits that are 0 or a
  // tenant limit above the total.
  TransferBudget::Limits transfers;
  // A PutBlock stream that sends nothing, or a GetBlock whose client takes nothing, for this
  // long is cancelled (stream_watchdog.h); zero or less = never. Default: 30 s.
  absl::Duration stream_idle_timeout = absl::Seconds(30);
  // Threads gRPC may run handlers on; a call beyond them is RESOURCE_EXHAUSTED at once.
  // Default: 1024.
  int max_call_threads = 1024;
  // Request logs: one JSON line per call (docs/observability.md) at or above this level:
  // debug|info|warn|error|off. Default: info.
  std::string log_level = "info";
  // Where the lines go; must outlive the server. Default: stderr.
  std::FILE* log_sink = stderr;
};

class MemoryServer {
 public:
  // INVALID_ARGUMENT/NOT_FOUND for bad config files, FAILED_PRECONDITION without a tokens
  // file or insecure_no_auth, UNAVAILABLE when the port (also one already in use: the port
  // is never shared, SO_REUSEPORT is off) or the DB cannot be opened.
  static absl::StatusOr<std::unique_ptr<MemoryServer>> Start(ServerConfig config);
  ~MemoryServer();  // Shutdown(absl::ZeroDuration()) if still running.

  // The address actually bound, e.g. "127.0.0.1:40123".
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  MemoryStore* store() { return store_.get(); }
  grpc::Server* grpc_server() { return server_.get(); }
  // MemoryStore calls whose handler is running now.
  int calls_in_flight() const { return service_ ? service_->calls_in_flight() : 0; }

  // Re-reads the tokens and tenants files (SIGHUP). What is in force stays when a file
  // fails to parse. OK without them (nothing to reload).
  absl::Status ReloadAuth();

  // Stops accepting calls, lets in-flight calls finish for up to `drain` (then cancels
  // them), flushes and closes the DB. Idempotent; returns the store's close status.
  absl::Status Shutdown(absl::Duration drain);

 private:
  MemoryServer() = default;
  void RegisterTransferMetrics();

  std::unique_ptr<MemoryStore> store_;
  std::optional<TokenTable> tokens_;
  std::unique_ptr<QuotaLedger> quotas_;
  std::unique_ptr<FileWatcher> tenants_watcher_;  // after quotas_: stops before it goes
  Metrics metrics_registry_;
  // Before the service and the gRPC server: both use them until they are gone.
  std::unique_ptr<TransferBudget> transfers_;
  std::unique_ptr<StreamWatchdog> watchdog_;
  std::unique_ptr<logging::RequestLogger> logger_;
  std::unique_ptr<logging::GrpcRequestLog> request_log_;
  std::unique_ptr<MemoryStoreService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<metrics::MetricsHttpServer> metrics_;
  std::atomic<bool> serving_{false};  // /readyz
  std::string address_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace kvfold::memory_svc

#endif  // KVFOLD_MEMORY_SVC_SERVICE_SERVER_H_
