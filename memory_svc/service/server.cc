#include "memory_svc/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/grpc_decode_errors.h"

namespace kvfold::memory_svc {
namespace {

constexpr char kServiceName[] = "kvfold.v1.MemoryStore";
constexpr int kMaxMessageBytes = 64 << 20;

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeCredentials(
    const ServerConfig& config) {
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (config.tls_cert_file.empty()) {
    if (!config.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  absl::StatusOr<std::string> cert = ReadFileToString(config.tls_cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFileToString(config.tls_key_file, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!config.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadFileToString(config.tls_client_ca_file, "client CA");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryServer>> MemoryServer::Start(ServerConfig config) {
  std::unique_ptr<MemoryServer> server(new MemoryServer());
  absl::StatusOr<logging::Level> level = logging::ParseLevel(config.log_level);
  if (!level.ok()) return level.status();
  logging::RequestLogOptions log_options;
  log_options.min_level = *level;
  log_options.sink = config.log_sink;
  server->logger_ = std::make_unique<logging::RequestLogger>(log_options);
  server->request_log_ = std::make_unique<logging::GrpcRequestLog>(server->logger_.get(), nullptr);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeCredentials(config);
  if (!credentials.ok()) return credentials.status();
  if (config.tokens_file.empty() && !config.insecure_no_auth) {
    return absl::FailedPreconditionError(
        "no --tokens-file: refusing to serve without authentication (give --insecure-no-auth "
        "to accept every caller as tenant 'default')");
  }
  if (!config.tokens_file.empty()) {
    absl::StatusOr<TokenTable> tokens = TokenTable::LoadFile(config.tokens_file);
    if (!tokens.ok()) return tokens.status();
    server->tokens_ = *std::move(tokens);
    server->tokens_->WatchFile(config.tokens_watch_period);
  }
  const size_t colon = config.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--listen must be host:port, got '",
                                                   config.listen, "'"));
  }
  if (absl::Status s = TransferBudget::Validate(config.transfers); !s.ok()) return s;
  if (config.max_call_threads < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the call thread limit must be at least 2, got ", config.max_call_threads));
  }
  absl::StatusOr<std::unique_ptr<MemoryStore>> store = MemoryStore::Open(config.store);
  if (!store.ok()) return store.status();
  server->store_ = *std::move(store);
  if (!config.tenants_file.empty()) {
    absl::StatusOr<std::unique_ptr<QuotaLedger>> quotas =
        QuotaLedger::Create(server->store_.get(), config.tenants_file);
    if (!quotas.ok()) {
      server->store_->Close().IgnoreError();
      return quotas.status();
    }
    server->quotas_ = *std::move(quotas);
    QuotaLedger* ledger = server->quotas_.get();
    server->metrics_registry_.SetExtraSource([ledger] { return ledger->RenderPrometheus(); });
    server->tenants_watcher_ = std::make_unique<FileWatcher>(
        config.tenants_file, config.tokens_watch_period, [ledger, path = config.tenants_file] {
          if (absl::Status s = ledger->Reload(); !s.ok()) {
            std::fprintf(stderr, "tenants file changed but was not reloaded (the limits in "
                                 "force stay): %s\n", s.ToString().c_str());
          } else {
            std::fprintf(stderr, "tenants file reloaded: %s\n", path.c_str());
          }
        });
  }
  server->transfers_ = std::make_unique<TransferBudget>(config.transfers);
  server->watchdog_ = std::make_unique<StreamWatchdog>(config.stream_idle_timeout);
  server->RegisterTransferMetrics();
  server->service_ = std::make_unique<MemoryStoreService>(
      server->store_.get(), server->tokens_ ? &*server->tokens_ : nullptr,
      &server->metrics_registry_, server->transfers_.get(), server->watchdog_.get(),
      server->quotas_.get(), server->request_log_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config.listen, *credentials, &port);
  builder.RegisterService(server->service_.get());
  // Payload chunks are <= 1 MiB, but the first message also carries the header, and a
  // full-mode session's header lists its whole history (4-5 bytes per token id): allow
  // headers of millions of tokens.
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // Blocks are 0.5-2 MiB: let a stream have a whole block in flight instead of growing the
  // HTTP/2 window from 64 KiB on every new stream.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  // gRPC sets SO_REUSEPORT by default: a second server on a port in use would then start
  // and the kernel would split the connections between two databases.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Each call holds a handler thread while it runs (the sync API); without a limit a flood
  // of calls grows threads without bound. gRPC answers a call beyond it RESOURCE_EXHAUSTED.
  grpc::ResourceQuota quota("kvfold-memory");
  quota.SetMaxThreads(config.max_call_threads);
  quota.Resize(config.transfers.total_bytes);
  builder.SetResourceQuota(quota);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MakeDecodeErrorInterceptorFactory());
  interceptors.push_back(server->request_log_->MakeFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || port == 0) {
    server->store_->Close().IgnoreError();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen,
                     " (address in use by another process, or not a local address)"));
  }
  server->port_ = port;
  server->address_ = absl::StrCat(config.listen.substr(0, colon), ":", port);
  // The DB is open: only now report SERVING.
  grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService();
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus(true);
  server->serving_ = true;
  if (config.metrics_port != 0) {
    MemoryServer* raw = server.get();
    absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> metrics =
        metrics::MetricsHttpServer::Start(
            absl::StrCat("0.0.0.0:", config.metrics_port < 0 ? 0 : config.metrics_port),
            [raw] { return raw->metrics_registry_.Render(); },
            [raw] { return raw->serving_.load(); });
    if (!metrics.ok()) return metrics.status();
    server->metrics_ = *std::move(metrics);
  }
  return server;
}

void MemoryServer::RegisterTransferMetrics() {
  metrics::Registry& r = metrics_registry_.registry();
  const TransferBudget* budget = transfers_.get();
  r.AddCallbackGauge("kvfold_memory_transfer_bytes",
                     "Block bytes leased by PutBlock and GetBlock calls in flight.",
                     [budget] { return static_cast<double>(budget->leased_bytes()); });
  r.AddCallbackGauge("kvfold_memory_transfer_budget_bytes",
                     "The most block bytes transfers in flight may lease.",
                     [budget] { return static_cast<double>(budget->limits().total_bytes); });
  r.AddCallbackCounter("kvfold_memory_transfer_refusals_total",
                       "Transfers refused RESOURCE_EXHAUSTED: no room in the budget in time.",
                       [budget] { return static_cast<double>(budget->refusals()); });
  const StreamWatchdog* watchdog = watchdog_.get();
  r.AddCallbackCounter("kvfold_memory_idle_streams_cancelled_total",
                       "PutBlock and GetBlock streams cancelled for moving nothing.",
                       [watchdog] { return static_cast<double>(watchdog->cancelled()); });
}

absl::Status MemoryServer::ReloadAuth() {
  absl::Status status = tokens_ ? tokens_->Reload() : absl::OkStatus();
  if (quotas_) status.Update(quotas_->Reload());
  return status;
}

MemoryServer::~MemoryServer() { Shutdown(absl::ZeroDuration()).IgnoreError(); }

absl::Status MemoryServer::Shutdown(absl::Duration drain) {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  serving_ = false;
  if (server_) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    // Our own drain first: gRPC's Shutdown(deadline) also waits for idle client channels to
    // go away, which would hold every shutdown for the whole deadline. Once no call of ours
    // is in flight, the server can stop at once.
    service_->Drain(drain);
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    server_->Wait();
  }
  metrics_.reset();
  return store_ ? store_->Close() : absl::OkStatus();
}

}  // namespace kvfold::memory_svc
