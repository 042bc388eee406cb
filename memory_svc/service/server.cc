#include "memory_svc/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
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
  server->service_ = std::make_unique<MemoryStoreService>(
      server->store_.get(), server->tokens_ ? &*server->tokens_ : nullptr,
      &server->metrics_registry_, server->quotas_.get(), server->request_log_.get());

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
  if (config.metrics_port != 0) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> metrics = MetricsHttpServer::Start(
        &server->metrics_registry_, config.metrics_port < 0 ? 0 : config.metrics_port);
    if (!metrics.ok()) return metrics.status();
    server->metrics_ = *std::move(metrics);
  }
  return server;
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
