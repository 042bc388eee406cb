// `kvfold chat`: a multi-turn session on a kvfold-inference replica. Interactive (one turn
// per stdin line, tokens streamed as they come) or one turn with --prompt. Each line is a
// user message rendered by the replica with the model's chat template (docs/tokenizers.md);
// --raw sends the text as it is.
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/file_util.h"
#include "common/grpc_status.h"
#include "inference_svc/engine/sampler.h"
#include "tools/kvfold/cli_client.h"
#include "tools/kvfold/cli_sampling.h"
#include "tools/kvfold/command.h"

namespace kvfold::cli {
namespace {

struct ChatFlags {
  ClientOptions client;
  std::string session;
  std::string prompt;
  std::string mode;  // empty: the server's default
  int window = 0;
  int sink = 0;
  std::string system;
  bool raw = false;
  int max_new_tokens = 0;
  double temperature = 0;
  int top_k = 0;
  double top_p = 0;
  uint64_t seed = 0;
  LogitAdjustFlags adjust;
  bool ignore_eos = false;
  bool usage = false;
  bool json = false;
  // The answer's form (docs/structured-output.md): one of these at most.
  bool json_object = false;
  std::string json_schema;  // the schema's JSON text, or @FILE
  bool lenient_schema = false;  // read past what the schema subset cannot hold
  std::vector<std::string> choices;
};

// The answer's form the flags ask for (type unspecified: free text). INVALID_ARGUMENT for
// an unreadable @FILE; the replica checks the schema itself.
absl::StatusOr<v1::ResponseFormat> FormatFromArgs(const ChatFlags& args) {
  v1::ResponseFormat format;
  if (args.json_object) format.set_type(v1::ResponseFormat::TYPE_JSON_OBJECT);
  if (!args.json_schema.empty()) {
    format.set_type(v1::ResponseFormat::TYPE_JSON_SCHEMA);
    if (args.json_schema[0] == '@') {
      auto text = ReadFileToString(args.json_schema.substr(1), "schema file");
      if (!text.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--json-schema ", args.json_schema, ": ", text.status().message()));
      }
      format.set_json_schema(*text);
    } else {
      format.set_json_schema(args.json_schema);
    }
    format.set_lenient(args.lenient_schema);
  }
  if (!args.choices.empty()) {
    format.set_type(v1::ResponseFormat::TYPE_CHOICE);
    for (const std::string& c : args.choices) format.add_choices(c);
  }
  return format;
}

// `*is_new` tells whether the session is new (its first turn carries the system message).
absl::Status EnsureSession(v1::InferenceService::Stub& stub, const ClientOptions& options,
                           const ChatFlags& args, std::string* session_id, bool* is_new) {
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
  auto mode = ParseKvMode(args.mode);
  if (!mode.ok()) return mode.status();
  create.mutable_config()->set_mode(*mode);
  if (args.window < 0 || args.sink < 0) {
    return absl::InvalidArgumentError("--window/--sink must be >= 0");
  }
  create.mutable_config()->set_window_size(static_cast<uint32_t>(args.window));
  create.mutable_config()->set_sink_tokens(static_cast<uint32_t>(args.sink));
  // Raw sessions prefill the system text; chat sessions send it as the first message.
  if (args.raw) create.set_system_prompt(args.system);
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
  e.presence_penalty = p.presence_penalty();
  e.frequency_penalty = p.frequency_penalty();
  if (p.repetition_penalty() != 0) e.repetition_penalty = p.repetition_penalty();
  e.min_p = p.min_p();
  e.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
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

absl::StatusOr<v1::SamplingParams> SamplingFromArgs(const ChatFlags& args) {
  auto bias = ParseLogitBias(args.adjust.logit_bias);
  if (!bias.ok()) return bias.status();
  v1::SamplingParams p;
  for (const auto& [id, value] : *bias) (*p.mutable_logit_bias())[id] = value;
  p.set_max_new_tokens(args.max_new_tokens);
  p.set_temperature(static_cast<float>(args.temperature));
  p.set_top_k(args.top_k);
  p.set_top_p(static_cast<float>(args.top_p));
  p.set_seed(args.seed);
  p.set_presence_penalty(static_cast<float>(args.adjust.presence_penalty));
  p.set_frequency_penalty(static_cast<float>(args.adjust.frequency_penalty));
  p.set_repetition_penalty(static_cast<float>(args.adjust.repetition_penalty));
  p.set_min_p(static_cast<float>(args.adjust.min_p));
  p.set_ignore_eos(args.ignore_eos);
  return p;
}

// How a line becomes a turn: raw text, or a user message (after a system message on the
// session's first turn).
struct TurnInput {
  bool raw = false;
  std::string system;  // sent once, then cleared
  v1::ResponseFormat format;  // every turn's
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
  if (input->format.type() != v1::ResponseFormat::TYPE_UNSPECIFIED) {
    *request.mutable_response_format() = input->format;
  }
  auto final_message = StreamGenerate(stub, options, request, [](const v1::TokenDelta& d) {
    std::fwrite(d.text().data(), 1, d.text().size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  if (!final_message.ok()) return final_message.status();
  for (const auto& w : final_message->warnings()) std::fprintf(stderr, "[warning] %s\n", w.c_str());
  for (const auto& s : final_message->schema_skipped()) {
    std::fprintf(stderr, "[schema] not held: %s\n", s.c_str());
  }
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

int RunChat(const ChatFlags& args, bool has_prompt) {
  const ClientOptions& options = args.client;
  if (absl::Status s = ValidateClientOptions(options); !s.ok()) return ReportError("chat", s);
  const absl::StatusOr<v1::SamplingParams> parsed = SamplingFromArgs(args);
  if (!parsed.ok()) return ReportError("chat", parsed.status());
  const v1::SamplingParams& sampling = *parsed;
  // The engine's own rules, checked before a session is created for a turn the replica
  // would refuse.
  if (absl::Status s = ValidateSampling(sampling); !s.ok()) return ReportError("chat", s);
  const absl::StatusOr<v1::ResponseFormat> format = FormatFromArgs(args);
  if (!format.ok()) return ReportError("chat", format.status());
  auto channel = MakeChannel(options);
  if (!channel.ok()) return ReportError("chat", channel.status());
  auto stub = v1::InferenceService::NewStub(*channel);
  std::string session_id = args.session;
  bool created = false;
  if (absl::Status s = EnsureSession(*stub, options, args, &session_id, &created); !s.ok()) {
    return ReportError("chat", s);
  }
  TurnInput input;
  input.raw = args.raw;
  input.format = *format;
  if (created && !input.raw) input.system = args.system;
  const bool print_usage = args.usage;
  const bool json = args.json;
  if (has_prompt) {
    absl::Status s =
        RunTurn(*stub, options, session_id, args.prompt, sampling, print_usage, json, &input);
    if (s.ok()) return 0;
    // A session made for a turn the replica refused holds nothing: do not leave it behind.
    if (created && (s.code() == absl::StatusCode::kInvalidArgument ||
                    s.code() == absl::StatusCode::kResourceExhausted)) {
      DeleteQuietly(*stub, options, session_id);
    }
    return ReportError("chat", s);
  }
  std::string line;
  int rc = 0;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    absl::Status s = RunTurn(*stub, options, session_id, line, sampling, print_usage, json, &input);
    if (!s.ok()) rc = ReportError("chat", s);  // keep the session going: the next turn may succeed
  }
  return rc;
}

RunFn SetupChat(CLI::App& app) {
  auto flags = std::make_shared<ChatFlags>();
  ChatFlags& f = *flags;
  app.footer(
      "Without --prompt, reads one turn per line from stdin (Ctrl-D ends). Without --session, "
      "creates a new session; a --session that does not exist is created.");
  app.add_option("--session", f.session, "session id");
  CLI::Option* prompt = app.add_option("--prompt", f.prompt, "one turn with this text");
  app.add_option("--mode", f.mode,
                 "full|sliding|sink|memory|memory_only (new sessions; default: the server's)");
  app.add_option("--window", f.window, "window (new sessions; 0 = the server's)");
  app.add_option("--sink", f.sink, "sink tokens (new sessions; 0 = the server's)");
  app.add_option("--system", f.system, "system message (new sessions)");
  AddSwitch(app, "--raw", f.raw, "send each line as raw text, not as a chat message");
  app.add_option("--max-new-tokens", f.max_new_tokens, "tokens per turn (0 = the server's)");
  app.add_option("--temperature", f.temperature, "sampling temperature (0 = greedy)");
  app.add_option("--top-k", f.top_k, "top-k sampling (0 = off)");
  app.add_option("--top-p", f.top_p, "nucleus sampling (0 = off)");
  app.add_option("--seed", f.seed, "sampling seed");
  AddLogitAdjustFlags(app, f.adjust);
  AddSwitch(app, "--ignore-eos", f.ignore_eos, "do not stop at an end-of-sequence token");
  AddSwitch(app, "--usage", f.usage, "print each turn's usage line to stderr");
  AddSwitch(app, "--json", f.json,
            "print each turn's final message as JSON on stdout after the text");
  CLI::Option* object = AddSwitch(app, "--json-object", f.json_object,
                                  "answer with a JSON object (docs/structured-output.md)");
  CLI::Option* schema =
      app.add_option("--json-schema", f.json_schema,
                     "answer with a document of this JSON Schema (its text, or @FILE)");
  AddSwitch(app, "--lenient-schema", f.lenient_schema,
            "with --json-schema: read past what the supported subset cannot hold, named on "
            "stderr, instead of refusing the schema")
      ->needs(schema);
  CLI::Option* choice =
      app.add_option("--choice", f.choices, "answer with exactly one of these texts (repeat it)");
  object->excludes(schema)->excludes(choice);
  schema->excludes(choice);
  AddClientFlags(app, f.client);
  return [flags, prompt] { return RunChat(*flags, prompt->count() > 0); };
}

}  // namespace
}  // namespace kvfold::cli

KVFOLD_REGISTER_COMMAND(chat, "multi-turn chat with a remote session (streams tokens)",
                        kvfold::cli::SetupChat);
