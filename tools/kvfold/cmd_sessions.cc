// `kvfold sessions ls|show|rm|fork|rollback`: manage sessions on a kvfold-inference replica.
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/grpc_status.h"
#include "tools/kvfold/cli_client.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

struct SessionsFlags {
  ClientOptions client;
  std::string verb;
  std::string session;
  int64_t page_size = 100;
  int64_t version = 0;
  std::string new_id;
  bool json = false;
};

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

void PrintSessionRow(const v1::Session& s) {
  std::printf("%-32s %-11s v%-6llu %10llu %10llu %12llu\n", s.session_id().c_str(),
              KvModeName(s.config().mode()).c_str(),
              static_cast<unsigned long long>(s.head_version()),
              static_cast<unsigned long long>(s.total_tokens()),
              static_cast<unsigned long long>(s.tokens_folded()),
              static_cast<unsigned long long>(s.memory_block_bytes()));
}

void PrintSessionHeader() {
  std::printf("%-32s %-11s %-7s %10s %10s %12s\n", "SESSION", "MODE", "HEAD", "TOKENS", "FOLDED",
              "BLOCK_BYTES");
}

void PrintSession(const v1::Session& s, bool json) {
  if (json) {
    std::printf("%s\n", ToJson(s).c_str());
    return;
  }
  std::printf("session          %s\n", s.session_id().c_str());
  std::printf("mode             %s (window %u, sink %u)\n", KvModeName(s.config().mode()).c_str(),
              s.config().window_size(), s.config().sink_tokens());
  std::printf("head version     %llu\n", static_cast<unsigned long long>(s.head_version()));
  std::printf("total tokens     %llu\n", static_cast<unsigned long long>(s.total_tokens()));
  std::printf("tokens folded    %llu\n", static_cast<unsigned long long>(s.tokens_folded()));
  std::printf("resident tokens  %llu\n", static_cast<unsigned long long>(s.resident_tokens()));
  std::printf("kv bytes         %llu\n", static_cast<unsigned long long>(s.kv_bytes_resident()));
  std::printf("block bytes      %llu\n", static_cast<unsigned long long>(s.memory_block_bytes()));
  std::printf("model            %s\n", s.model_fingerprint().c_str());
  if (!s.projector_fingerprint().empty()) {
    std::printf("projector        %s\n", s.projector_fingerprint().c_str());
  }
}

// "quota: sessions 3/10  versions 12/unlimited  bytes 1048576/10485760"
void PrintUsage(const v1::TenantUsage& u) {
  auto limit = [](uint64_t max) { return max == 0 ? std::string("unlimited") : absl::StrCat(max); };
  std::printf("quota: sessions %llu/%s  versions %llu/%s  bytes %llu/%s\n",
              static_cast<unsigned long long>(u.sessions()), limit(u.max_sessions()).c_str(),
              static_cast<unsigned long long>(u.versions()), limit(u.max_versions()).c_str(),
              static_cast<unsigned long long>(u.bytes()), limit(u.max_bytes()).c_str());
}

int RunSessions(const SessionsFlags& args) {
  const ClientOptions& options = args.client;
  if (absl::Status s = ValidateClientOptions(options); !s.ok()) return ReportError("sessions", s);
  auto channel = MakeChannel(options);
  if (!channel.ok()) return ReportError("sessions", channel.status());
  auto stub = v1::InferenceService::NewStub(*channel);
  const bool json = args.json;
  const std::string& verb = args.verb;
  const std::string& session = args.session;
  if (args.version < 0) {
    return ReportError("sessions", absl::InvalidArgumentError("--version must be >= 0"));
  }
  if (verb != "ls" && session.empty()) {
    return ReportError("sessions", absl::InvalidArgumentError(absl::StrCat(verb, " needs SESSION")));
  }

  grpc::ClientContext context;
  PrepareContext(options, &context);
  if (verb == "ls") {
    v1::ListSessionsRequest request;
    request.set_page_size(static_cast<uint32_t>(args.page_size));
    if (!json) PrintSessionHeader();
    std::string page_token;
    v1::TenantUsage usage;
    do {
      grpc::ClientContext page_context;
      PrepareContext(options, &page_context);
      request.set_page_token(page_token);
      v1::ListSessionsResponse response;
      absl::Status s = FromGrpcStatus(stub->ListSessions(&page_context, request, &response));
      if (!s.ok()) return ReportError("sessions", s);
      for (const auto& session_msg : response.sessions()) {
        if (json) {
          std::printf("%s\n", ToJson(session_msg).c_str());
        } else {
          PrintSessionRow(session_msg);
        }
      }
      page_token = response.next_page_token();
      if (response.has_usage()) usage = response.usage();
    } while (!page_token.empty());
    if (usage.max_sessions() + usage.max_versions() + usage.max_bytes() > 0) {
      if (json) {
        std::printf("{\"usage\":%s}\n", ToJson(usage).c_str());
      } else {
        PrintUsage(usage);
      }
    }
    return 0;
  }
  if (verb == "show") {
    v1::GetSessionRequest request;
    request.set_session_id(session);
    v1::Session response;
    absl::Status s = FromGrpcStatus(stub->GetSession(&context, request, &response));
    if (!s.ok()) return ReportError("sessions", s);
    PrintSession(response, json);
    return 0;
  }
  if (verb == "rm") {
    v1::DeleteSessionRequest request;
    request.set_session_id(session);
    v1::DeleteSessionResponse response;
    absl::Status s = FromGrpcStatus(stub->DeleteSession(&context, request, &response));
    if (!s.ok()) return ReportError("sessions", s);
    std::printf("deleted %s (%u versions)\n", session.c_str(), response.versions_deleted());
    return 0;
  }
  if (verb == "fork") {
    v1::ForkSessionRequest request;
    request.set_source_session_id(session);
    request.set_version(static_cast<uint64_t>(args.version));
    request.set_new_session_id(args.new_id);
    v1::Session response;
    absl::Status s = FromGrpcStatus(stub->ForkSession(&context, request, &response));
    if (!s.ok()) return ReportError("sessions", s);
    if (json) {
      PrintSession(response, true);
    } else {
      std::printf("forked %s -> %s\n", session.c_str(), response.session_id().c_str());
    }
    return 0;
  }
  if (verb == "rollback") {
    if (args.version <= 0) {
      return ReportError("sessions", absl::InvalidArgumentError("rollback needs --version V (>= 1)"));
    }
    v1::RollbackSessionRequest request;
    request.set_session_id(session);
    request.set_version(static_cast<uint64_t>(args.version));
    v1::Session response;
    absl::Status s = FromGrpcStatus(stub->RollbackSession(&context, request, &response));
    if (!s.ok()) return ReportError("sessions", s);
    if (json) {
      PrintSession(response, true);
    } else {
      std::printf("%s: head is now v%llu\n", session.c_str(),
                  static_cast<unsigned long long>(response.head_version()));
    }
    return 0;
  }
  return ReportError("sessions", absl::InvalidArgumentError(absl::StrCat("unknown verb '", verb, "'")));
}

RunFn SetupSessions(CLI::App& app) {
  auto flags = std::make_shared<SessionsFlags>();
  SessionsFlags& f = *flags;
  app.footer(
      "  kvfold sessions ls [--page-size N] [--json]\n"
      "  kvfold sessions show SESSION [--json]\n"
      "  kvfold sessions rm SESSION\n"
      "  kvfold sessions fork SESSION [--version V] [--new-id ID] [--json]\n"
      "  kvfold sessions rollback SESSION --version V [--json]");
  app.add_option("verb", f.verb, "ls|show|rm|fork|rollback")
      ->required()
      ->check(CLI::IsMember({"ls", "show", "rm", "fork", "rollback"}));
  app.add_option("session", f.session, "session id (all verbs but ls)");
  app.add_option("--page-size", f.page_size, "ls: sessions per ListSessions call")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  app.add_option("--version", f.version,
                 "fork: the version to fork (0 = head); rollback: the "
                 "version to make head");
  app.add_option("--new-id", f.new_id, "fork: id of the new session (default: generated)");
  AddSwitch(app, "--json", f.json, "JSON instead of text");
  AddClientFlags(app, f.client);
  return [flags] { return RunSessions(*flags); };
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(sessions, "list, show, delete, fork and roll back remote sessions",
                        kvfold::cli::SetupSessions);
