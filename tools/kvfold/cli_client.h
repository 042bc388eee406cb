// Shared pieces of the remote `kvfold` commands (chat, sessions): the client flags
// (--target, --tls-ca, --token, ...), channel creation, and a streaming Generate helper
// that other commands may call.
#ifndef KVFOLD_TOOLS_KVFOLD_CLI_CLIENT_H_
#define KVFOLD_TOOLS_KVFOLD_CLI_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvfold/v1/inference.grpc.pb.h"

namespace kvfold::cli {

// Connection flags shared by every remote command.
struct ClientOptions {
  // host:port of a kvfold-inference replica. Default: 127.0.0.1:7071.
  std::string target = "127.0.0.1:7071";
  // PEM file with the CA that signed the server certificate; empty = plaintext.
  std::string tls_ca;
  // Client certificate and key for mTLS (optional, with --tls-ca).
  std::string tls_cert;
  std::string tls_key;
  // Bearer token sent as `authorization: Bearer <token>`; empty = none.
  std::string token;
  // Per-call deadline in seconds; 0 = none.
  double deadline_s = 0;
};

// Adds the connection flags to a remote command: --target, --tls-ca, --tls-cert, --tls-key,
// --token (default: $KVFOLD_TOKEN), --deadline-s.
void AddClientFlags(CLI::App& app, ClientOptions& options);

// InvalidArgument for a combination of client flags that cannot work (empty target,
// --tls-cert without --tls-key or the reverse, negative deadline).
absl::Status ValidateClientOptions(const ClientOptions& options);

// A channel to options.target (TLS when tls_ca is set). InvalidArgument/NotFound when a
// TLS file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options);

// Adds the bearer token and the deadline to a fresh context.
void PrepareContext(const ClientOptions& options, grpc::ClientContext* context);

// Streams one Generate call. on_delta is called for every TokenDelta (in order); the final
// message is returned. The RPC's status is returned as an absl::Status on failure.
absl::StatusOr<v1::GenerateFinal> StreamGenerate(
    v1::InferenceService::Stub& stub, const ClientOptions& options,
    const v1::GenerateRequest& request,
    const std::function<void(const v1::TokenDelta&)>& on_delta);

// Exit code for a failed status: 2 for InvalidArgument/NotFound/AlreadyExists/
// FailedPrecondition (bad input), 1 otherwise. Prints "kvfold <cmd>: <status>" to stderr.
int ReportError(const char* command, const absl::Status& status);

// core::KvModeName of an API mode; "-" for KV_MODE_UNSPECIFIED (not reported).
std::string KvModeName(v1::KvMode mode);
// core::ParseKvMode as the API's enum; "" and "default" are KV_MODE_UNSPECIFIED (the
// server's default mode). InvalidArgument for an unknown name.
absl::StatusOr<v1::KvMode> ParseKvMode(const std::string& name);

}  // namespace kvfold::cli

#endif  // KVFOLD_TOOLS_KVFOLD_CLI_CLIENT_H_
