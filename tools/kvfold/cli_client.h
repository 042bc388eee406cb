// Shared pieces of the remote `kvfold` commands (chat, sessions): the client flags
// (--target, --tls_ca, --token), a tiny per-command flag parser (the remote commands do not
// use global absl flags, so they never collide with other commands' flag names), channel
// creation, and a streaming Generate helper that other commands may call.
#ifndef KVFOLD_TOOLS_KVFOLD_CLI_CLIENT_H_
#define KVFOLD_TOOLS_KVFOLD_CLI_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

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
  // Client certificate and key for mTLS (optional, with --tls_ca).
  std::string tls_cert;
  std::string tls_key;
  // Bearer token sent as `authorization: Bearer <token>`; empty = none.
  std::string token;
  // Per-call deadline in seconds; 0 = none.
  double deadline_s = 0;
};

// Parsed "--name=value" / "--name value" / "--flag" arguments plus positional ones.
// Every flag name must be in `known` (value flags) or `known_bools` (no value).
struct ParsedArgs {
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  // InvalidArgument when present and not an integer / a number / a boolean.
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;
};

// Returns InvalidArgument naming the first unknown flag or a value flag without value.
absl::StatusOr<ParsedArgs> ParseArgs(int argc, char** argv, const std::vector<std::string>& known,
                                     const std::vector<std::string>& known_bools);

// The client flag names ParseArgs must accept (target, tls_ca, tls_cert, tls_key, token,
// deadline_s), and their help text.
const std::vector<std::string>& ClientFlagNames();
const char* ClientFlagsHelp();
absl::StatusOr<ClientOptions> ClientOptionsFromArgs(const ParsedArgs& args);

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

// Human-readable names of modes ("full", "sliding", "sink", "memory", "memory_only").
std::string KvModeName(v1::KvMode mode);
// InvalidArgument for an unknown name.
absl::StatusOr<v1::KvMode> ParseKvMode(const std::string& name);

}  // namespace kvfold::cli

#endif  // KVFOLD_TOOLS_KVFOLD_CLI_CLIENT_H_
