#include "tools/kvfold/cli_client.h"

#include <chrono>
#include <cstdio>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/grpc_status.h"

namespace kvfold::cli {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v) {
    if (x == s) return true;
  }
  return false;
}

}  // namespace

std::string ParsedArgs::Get(const std::string& name, const std::string& fallback) const {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> ParsedArgs::GetInt(const std::string& name, int64_t fallback) const {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " expects an integer, got '",
                                                   it->second, "'"));
  }
  return v;
}

absl::StatusOr<double> ParsedArgs::GetDouble(const std::string& name, double fallback) const {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  double v = 0;
  if (!absl::SimpleAtod(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " expects a number, got '",
                                                   it->second, "'"));
  }
  return v;
}

absl::StatusOr<ParsedArgs> ParseArgs(int argc, char** argv, const std::vector<std::string>& known,
                                     const std::vector<std::string>& known_bools) {
  ParsedArgs out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--") || arg == "--") {
      out.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (Contains(known_bools, name)) {
      if (!has_value) value = "true";
      out.flags[name] = value;
      continue;
    }
    if (!Contains(known, name)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (!has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    out.flags[name] = value;
  }
  return out;
}

const std::vector<std::string>& ClientFlagNames() {
  static const std::vector<std::string> names = {"target", "tls_ca", "tls_cert", "tls_key",
                                                 "token", "deadline_s"};
  return names;
}

const char* ClientFlagsHelp() {
  return "  --target HOST:PORT   kvfold-inference replica (default 127.0.0.1:7071)\n"
         "  --tls_ca FILE        CA certificate (PEM): use TLS\n"
         "  --tls_cert/--tls_key client certificate and key for mTLS\n"
         "  --token TOKEN        bearer token (default: $KVFOLD_TOKEN)\n"
         "  --deadline_s S       per-call deadline in seconds (default none)\n";
}

absl::StatusOr<ClientOptions> ClientOptionsFromArgs(const ParsedArgs& args) {
  ClientOptions o;
  o.target = args.Get("target", o.target);
  o.tls_ca = args.Get("tls_ca");
  o.tls_cert = args.Get("tls_cert");
  o.tls_key = args.Get("tls_key");
  const char* env_token = std::getenv("KVFOLD_TOKEN");
  o.token = args.Get("token", env_token ? env_token : "");
  auto deadline = args.GetDouble("deadline_s", 0);
  if (!deadline.ok()) return deadline.status();
  if (*deadline < 0) return absl::InvalidArgumentError("--deadline_s must be >= 0");
  o.deadline_s = *deadline;
  if (o.target.empty()) return absl::InvalidArgumentError("--target must not be empty");
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  return o;
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
  switch (mode) {
    case v1::KV_MODE_FULL: return "full";
    case v1::KV_MODE_SLIDING: return "sliding";
    case v1::KV_MODE_SINK: return "sink";
    case v1::KV_MODE_MEMORY: return "memory";
    case v1::KV_MODE_MEMORY_ONLY: return "memory_only";
    default: return "-";  // not reported (e.g. ListSessions rows)
  }
}

absl::StatusOr<v1::KvMode> ParseKvMode(const std::string& name) {
  if (name == "full") return v1::KV_MODE_FULL;
  if (name == "sliding") return v1::KV_MODE_SLIDING;
  if (name == "sink") return v1::KV_MODE_SINK;
  if (name == "memory") return v1::KV_MODE_MEMORY;
  if (name == "memory_only") return v1::KV_MODE_MEMORY_ONLY;
  if (name.empty() || name == "default") return v1::KV_MODE_UNSPECIFIED;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode '", name, "' (full, sliding, sink, memory, memory_only)"));
}

}  // namespace kvfold::cli
