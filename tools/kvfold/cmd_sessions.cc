// `kvfold sessions ls|show|rm|fork|rollback`: manage sessions on a kvfold-inference replica.
#include <cstdio>
#include <string>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "tools/kvfold/cli_client.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

constexpr char kUsage[] =
    "usage: kvfold sessions ls [--page_size N] [--json]\n"
    "       kvfold sessions show SESSION [--json]\n"
    "       kvfold sessions rm SESSION\n"
    "       kvfold sessions fork SESSION [--version V] [--new_id ID] [--json]\n"
    "       kvfold sessions rollback SESSION --version V [--json]\n"
    "flags:\n";

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

int RunSessions(int argc, char** argv) {
  std::vector<std::string> known = ClientFlagNames();
  for (const char* f : {"page_size", "version", "new_id"}) known.push_back(f);
  auto args = ParseArgs(argc, argv, known, {"json", "help"});
  if (!args.ok()) {
    std::fprintf(stderr, "%s%s", kUsage, ClientFlagsHelp());
    return ReportError("sessions", args.status());
  }
  if (args->Has("help") || args->positional.empty()) {
    std::fprintf(args->Has("help") ? stdout : stderr, "%s%s", kUsage, ClientFlagsHelp());
    return args->Has("help") ? 0 : 2;
  }
  auto options = ClientOptionsFromArgs(*args);
  if (!options.ok()) return ReportError("sessions", options.status());
  auto channel = MakeChannel(*options);
  if (!channel.ok()) return ReportError("sessions", channel.status());
  auto stub = v1::InferenceService::NewStub(*channel);
  const bool json = args->Has("json");
  const std::string verb = args->positional[0];
  const std::string session = args->positional.size() > 1 ? args->positional[1] : "";
  auto version = args->GetInt("version", 0);
  if (!version.ok()) return ReportError("sessions", version.status());
  if (*version < 0) return ReportError("sessions", absl::InvalidArgumentError("--version must be >= 0"));
  if (verb != "ls" && session.empty()) {
    return ReportError("sessions", absl::InvalidArgumentError(absl::StrCat(verb, " needs SESSION")));
  }

  grpc::ClientContext context;
  PrepareContext(*options, &context);
  if (verb == "ls") {
    auto page_size = args->GetInt("page_size", 100);
    if (!page_size.ok()) return ReportError("sessions", page_size.status());
    v1::ListSessionsRequest request;
    request.set_page_size(static_cast<uint32_t>(*page_size));
    if (!json) PrintSessionHeader();
    std::string page_token;
    v1::TenantUsage usage;
    do {
      grpc::ClientContext page_context;
      PrepareContext(*options, &page_context);
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
    request.set_version(static_cast<uint64_t>(*version));
    request.set_new_session_id(args->Get("new_id"));
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
    if (*version <= 0) {
      return ReportError("sessions", absl::InvalidArgumentError("rollback needs --version V (>= 1)"));
    }
    v1::RollbackSessionRequest request;
    request.set_session_id(session);
    request.set_version(static_cast<uint64_t>(*version));
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
  std::fprintf(stderr, "%s%s", kUsage, ClientFlagsHelp());
  return ReportError("sessions", absl::InvalidArgumentError(absl::StrCat("unknown verb '", verb, "'")));
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(sessions, "list, show, delete, fork and roll back remote sessions",
                        kvfold::cli::RunSessions);
