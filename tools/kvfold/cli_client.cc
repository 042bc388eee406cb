#include "tools/kvfold/cli_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/grpc_status.h"
#include "common/proto_enums.h"
#include "core/kv_mode.h"

namespace kvfold::cli {

void AddClientFlags(CLI::App& app, ClientOptions& options) {
  app.add_option("--target", options.target, "kvfold-inference replica host:port");
  app.add_option("--tls-ca", options.tls_ca, "CA certificate (PEM): use TLS");
  app.add_option("--tls-cert", options.tls_cert, "client certificate (PEM) for mTLS");
  app.add_option("--tls-key", options.tls_key, "client private key (PEM) for mTLS");
  app.add_option("--token", options.token, "bearer token")->envname("KVFOLD_TOKEN");
  app.add_option("--deadline-s", options.deadline_s, "per-call deadline in seconds (0 = none)");
}

absl::Status ValidateClientOptions(const ClientOptions& o) {
  if (o.deadline_s < 0) return absl::InvalidArgumentError("--deadline-s must be >= 0");
  if (o.target.empty()) return absl::InvalidArgumentError("--target must not be empty");
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_ca.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    auto ca = ReadFileToString(options.tls_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    if (!options.tls_cert.empty()) {
      auto cert = ReadFileToString(options.tls_cert);
      if (!cert.ok()) return cert.status();
      auto key = ReadFileToString(options.tls_key);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Per-call balancing over every address the target resolves to: with a headless
  // Service (dns:///inference-svc-headless.NS.svc:7071) calls spread over all ready
  // replicas instead of pinning one connection to one pod (k8s/README.md).
  args.SetLoadBalancingPolicyName("round_robin");
  return grpc::CreateCustomChannel(options.target, creds, args);
}

void PrepareContext(const ClientOptions& options, grpc::ClientContext* context) {
  if (!options.token.empty()) context->AddMetadata("authorization", "Bearer " + options.token);
  if (options.deadline_s > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(options.deadline_s * 1000)));
  }
}

absl::StatusOr<v1::GenerateFinal> StreamGenerate(
    v1::InferenceService::Stub& stub, const ClientOptions& options,
    const v1::GenerateRequest& request,
    const std::function<void(const v1::TokenDelta&)>& on_delta) {
  grpc::ClientContext context;
  PrepareContext(options, &context);
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  v1::GenerateFinal final_message;
  bool have_final = false;
  while (reader->Read(&response)) {
    if (response.has_delta()) {
      if (on_delta) on_delta(response.delta());
    } else if (response.has_final()) {
      final_message = response.final();
      have_final = true;
    }
  }
  absl::Status status = FromGrpcStatus(reader->Finish());
  if (!status.ok()) return status;
  if (!have_final) return absl::InternalError("stream ended without a final message");
  return final_message;
}

int ReportError(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "kvfold %s: %s\n", command, status.ToString().c_str());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      return 2;
    default:
      return 1;
  }
}

std::string KvModeName(v1::KvMode mode) {
  absl::StatusOr<core::KvMode> m = KvModeFromProto(mode);
  return m.ok() ? core::KvModeName(*m) : "-";
}

absl::StatusOr<v1::KvMode> ParseKvMode(const std::string& name) {
  if (name.empty() || name == "default") return v1::KV_MODE_UNSPECIFIED;
  absl::StatusOr<core::KvMode> mode = core::ParseKvMode(name);
  if (!mode.ok()) return mode.status();
  return KvModeToProto(*mode);
}

}  // namespace kvfold::cli
