// `kvfold chat`: a multi-turn session on a kvfold-inference replica. Interactive (one turn
// per stdin line, tokens streamed as they come) or one turn with --prompt. Each line is a
// user message rendered by the replica with the model's chat template (docs/tokenizers.md);
// --raw sends the text as it is.
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "inference_svc/engine/sampler.h"
#include "tools/kvfold/cli_client.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

constexpr char kUsage[] =
    "usage: kvfold chat [--session ID] [--prompt TEXT] [flags]\n"
    "  Without --prompt, reads one turn per line from stdin (Ctrl-D ends).\n"
    "  Without --session, creates a new session; a --session that does not exist is created.\n"
    "  --mode full|sliding|sink|memory|memory_only  (new sessions; default: the server's)\n"
    "  --window N  --sink N  --system TEXT           (new sessions)\n"
    "  --raw         send each line as raw text, not as a chat message\n"
    "  --max_new_tokens N  --temperature T  --top_k K  --top_p P  --seed S  --ignore_eos\n"
    "  --usage       print each turn's usage line to stderr\n"
    "  --json        print each turn's final message as JSON on stdout after the text\n"
    "flags:\n";

// `*is_new` tells whether the session is new (its first turn carries the system message).
absl::Status EnsureSession(v1::InferenceService::Stub& stub, const ClientOptions& options,
                           const ParsedArgs& args, std::string* session_id, bool* is_new) {
  *is_new = false;
  if (!session_id->empty()) {
    grpc::ClientContext context;
    PrepareContext(options, &context);
    v1::GetSessionRequest get;
    get.set_session_id(*session_id);
    v1::Session existing;
    absl::Status s = FromGrpcStatus(stub.GetSession(&context, get, &existing));
    if (s.ok() || s.code() != absl::StatusCode::kNotFound) return s;
  }
  v1::CreateSessionRequest create;
  create.set_session_id(*session_id);
  auto mode = ParseKvMode(args.Get("mode"));
  if (!mode.ok()) return mode.status();
  create.mutable_config()->set_mode(*mode);
  auto window = args.GetInt("window", 0);
  if (!window.ok()) return window.status();
  auto sink = args.GetInt("sink", 0);
  if (!sink.ok()) return sink.status();
  if (*window < 0 || *sink < 0) return absl::InvalidArgumentError("--window/--sink must be >= 0");
  create.mutable_config()->set_window_size(static_cast<uint32_t>(*window));
  create.mutable_config()->set_sink_tokens(static_cast<uint32_t>(*sink));
  // Raw sessions prefill the system text; chat sessions send it as the first message.
  if (args.Has("raw")) create.set_system_prompt(args.Get("system"));
  grpc::ClientContext context;
  PrepareContext(options, &context);
  v1::Session created;
  absl::Status s = FromGrpcStatus(stub.CreateSession(&context, create, &created));
  if (!s.ok()) return s;
  *session_id = created.session_id();
  *is_new = true;
  std::fprintf(stderr, "[session %s, mode %s, version %llu]\n", session_id->c_str(),
               KvModeName(created.config().mode()).c_str(),
               static_cast<unsigned long long>(created.head_version()));
  return absl::OkStatus();
}

// engine::SamplingParams::Validate on the request's sampling fields.
absl::Status ValidateSampling(const v1::SamplingParams& p) {
  engine::SamplingParams e;
  e.temperature = p.temperature();
  e.top_k = p.top_k();
  e.top_p = p.top_p();
  e.max_new_tokens = p.max_new_tokens();
  return e.Validate();
}

void DeleteQuietly(v1::InferenceService::Stub& stub, const ClientOptions& options,
                   const std::string& session_id) {
  grpc::ClientContext context;
  PrepareContext(options, &context);
  v1::DeleteSessionRequest request;
  request.set_session_id(session_id);
  v1::DeleteSessionResponse response;
  (void)stub.DeleteSession(&context, request, &response);
}

absl::StatusOr<v1::SamplingParams> SamplingFromArgs(const ParsedArgs& args) {
  v1::SamplingParams p;
  auto max_new = args.GetInt("max_new_tokens", 0);
  auto temperature = args.GetDouble("temperature", 0);
  auto top_k = args.GetInt("top_k", 0);
  auto top_p = args.GetDouble("top_p", 0);
  auto seed = args.GetInt("seed", 0);
  for (const absl::Status& s :
       {max_new.status(), temperature.status(), top_k.status(), top_p.status(), seed.status()}) {
    if (!s.ok()) return s;
  }
  p.set_max_new_tokens(static_cast<int32_t>(*max_new));
  p.set_temperature(static_cast<float>(*temperature));
  p.set_top_k(static_cast<int32_t>(*top_k));
  p.set_top_p(static_cast<float>(*top_p));
  p.set_seed(static_cast<uint64_t>(*seed));
  p.set_ignore_eos(args.Has("ignore_eos"));
  return p;
}

// How a line becomes a turn: raw text, or a user message (after a system message on the
// session's first turn).
struct TurnInput {
  bool raw = false;
  std::string system;  // sent once, then cleared
};

absl::Status RunTurn(v1::InferenceService::Stub& stub, const ClientOptions& options,
                     const std::string& session_id, const std::string& prompt,
                     const v1::SamplingParams& sampling, bool print_usage, bool json,
                     TurnInput* input) {
  v1::GenerateRequest request;
  request.set_session_id(session_id);
  if (input->raw) {
    request.set_prompt(prompt);
  } else {
    if (!input->system.empty()) {
      v1::ChatMessage* system = request.add_messages();
      system->set_role("system");
      system->set_content(std::exchange(input->system, ""));
    }
    v1::ChatMessage* user = request.add_messages();
    user->set_role("user");
    user->set_content(prompt);
  }
  *request.mutable_sampling() = sampling;
  auto final_message = StreamGenerate(stub, options, request, [](const v1::TokenDelta& d) {
    std::fwrite(d.text().data(), 1, d.text().size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  if (!final_message.ok()) return final_message.status();
  for (const auto& w : final_message->warnings()) std::fprintf(stderr, "[warning] %s\n", w.c_str());
  const v1::Usage& u = final_message->usage();
  if (print_usage) {
    std::fprintf(stderr,
                 "[%s: prompt %u, generated %u, folded %u, version %llu, kv %llu B, %s, "
                 "ttft %.1f ms, total %.1f ms]\n",
                 u.replica().c_str(), u.prompt_tokens(), u.generated_tokens(), u.tokens_folded(),
                 static_cast<unsigned long long>(u.memory_version()),
                 static_cast<unsigned long long>(u.kv_bytes_resident()),
                 u.restored_from_store() ? "restored from store" : "cached",
                 u.timings().time_to_first_token_ms(), u.timings().total_ms());
  }
  if (json) {
    std::string out;
    google::protobuf::util::JsonPrintOptions opts;
    opts.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(*final_message, &out, opts);
    std::printf("%s\n", out.c_str());
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

int RunChat(int argc, char** argv) {
  std::vector<std::string> known = ClientFlagNames();
  for (const char* f : {"session", "prompt", "mode", "window", "sink", "system", "max_new_tokens",
                        "temperature", "top_k", "top_p", "seed"}) {
    known.push_back(f);
  }
  auto args = ParseArgs(argc, argv, known, {"json", "usage", "ignore_eos", "help", "raw"});
  if (!args.ok()) {
    std::fprintf(stderr, "%s%s", kUsage, ClientFlagsHelp());
    return ReportError("chat", args.status());
  }
  if (args->Has("help")) {
    std::printf("%s%s", kUsage, ClientFlagsHelp());
    return 0;
  }
  if (!args->positional.empty()) {
    return ReportError("chat", absl::InvalidArgumentError(absl::StrCat("unexpected argument '",
                                                                       args->positional[0], "'")));
  }
  auto options = ClientOptionsFromArgs(*args);
  if (!options.ok()) return ReportError("chat", options.status());
  auto sampling = SamplingFromArgs(*args);
  if (!sampling.ok()) return ReportError("chat", sampling.status());
  // The engine's own rules, checked before a session is created for a turn the replica
  // would refuse.
  if (absl::Status s = ValidateSampling(*sampling); !s.ok()) return ReportError("chat", s);
  auto channel = MakeChannel(*options);
  if (!channel.ok()) return ReportError("chat", channel.status());
  auto stub = v1::InferenceService::NewStub(*channel);
  std::string session_id = args->Get("session");
  bool created = false;
  if (absl::Status s = EnsureSession(*stub, *options, *args, &session_id, &created); !s.ok()) {
    return ReportError("chat", s);
  }
  TurnInput input;
  input.raw = args->Has("raw");
  if (created && !input.raw) input.system = args->Get("system");
  const bool print_usage = args->Has("usage");
  const bool json = args->Has("json");
  if (args->Has("prompt")) {
    absl::Status s = RunTurn(*stub, *options, session_id, args->Get("prompt"), *sampling,
                             print_usage, json, &input);
    if (s.ok()) return 0;
    // A session made for a turn the replica refused holds nothing: do not leave it behind.
    if (created && (s.code() == absl::StatusCode::kInvalidArgument ||
                    s.code() == absl::StatusCode::kResourceExhausted)) {
      DeleteQuietly(*stub, *options, session_id);
    }
    return ReportError("chat", s);
  }
  std::string line;
  int rc = 0;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    absl::Status s =
        RunTurn(*stub, *options, session_id, line, *sampling, print_usage, json, &input);
    if (!s.ok()) rc = ReportError("chat", s);  // keep the session going: the next turn may succeed
  }
  return rc;
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(chat, "multi-turn chat with a remote session (streams tokens)",
                        kvfold::cli::RunChat);
