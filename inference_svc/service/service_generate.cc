// InferenceServiceImpl::Generate: the request becomes a runtime turn; its tokens stream
// back as deltas, its usage as the final message. See inference_service.h.
#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/json_depth.h"
#include "inference_svc/http/tool_calls.h"
#include "inference_svc/service/inference_service.h"
#include "inference_svc/service/proto_convert.h"
#include "inference_svc/service/validation.h"

namespace kvfold::service {
namespace {

bool CallEnded(grpc::ServerContext* context) {
  return context->IsCancelled() || context->deadline() < std::chrono::system_clock::now();
}

// The status for the client; a retry hint travels as trailing metadata `retry-after`
// (whole seconds, at least 1) and `retry-after-ms` (docs/api.md).
grpc::Status Reply(const absl::Status& status, grpc::ServerContext* context) {
  if (std::optional<absl::Duration> after = runtime::RetryAfter(status); after.has_value()) {
    const int64_t ms = absl::ToInt64Milliseconds(*after);
    context->AddTrailingMetadata("retry-after", std::to_string(std::max<int64_t>(1, (ms + 999) / 1000)));
    context->AddTrailingMetadata("retry-after-ms", std::to_string(ms));
  }
  return ToGrpcStatus(status);
}

// The request's tools and tool_choice read as the HTTP front reads OpenAI's (ParseTools),
// so both APIs take, refuse and answer tools alike.
absl::StatusOr<http::ToolSet> ToolsOf(const v1::GenerateRequest& request) {
  using ojson = nlohmann::ordered_json;
  ojson body = ojson::object();
  if (!request.tools().empty()) {
    ojson& tools = body["tools"] = ojson::array();
    for (int i = 0; i < request.tools_size(); ++i) {
      const std::string what = absl::StrCat("tools[", i, "]");
      if (absl::Status s = CheckJsonDepth(request.tools(i), what); !s.ok()) return s;
      ojson tool = ojson::parse(request.tools(i), nullptr, /*allow_exceptions=*/false);
      if (tool.is_discarded()) {
        return absl::InvalidArgumentError(absl::StrCat(what, " is not JSON text"));
      }
      tools.push_back(std::move(tool));
    }
  }
  const v1::ToolChoice& choice = request.tool_choice();
  if (!choice.function().empty() && choice.mode() != v1::ToolChoice::MODE_FUNCTION) {
    return absl::InvalidArgumentError("tool_choice.function goes with MODE_FUNCTION");
  }
  switch (choice.mode()) {
    case v1::ToolChoice::MODE_UNSPECIFIED:
      break;
    case v1::ToolChoice::MODE_NONE:
      body["tool_choice"] = "none";
      break;
    case v1::ToolChoice::MODE_AUTO:
      body["tool_choice"] = "auto";
      break;
    case v1::ToolChoice::MODE_REQUIRED:
      body["tool_choice"] = "required";
      break;
    case v1::ToolChoice::MODE_FUNCTION:
      if (choice.function().empty()) {
        return absl::InvalidArgumentError("tool_choice MODE_FUNCTION needs tool_choice.function");
      }
      body["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice.function()}}}};
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tool_choice.mode ", choice.mode(), " is not a known mode"));
  }
  if (choice.single_call()) body["parallel_tool_calls"] = false;
  return http::ParseTools(body);
}

}  // namespace

grpc::Status InferenceServiceImpl::Generate(grpc::ServerContext* context,
                                            const v1::GenerateRequest* request,
                                            grpc::ServerWriter<v1::GenerateResponse>* writer) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) return ToGrpcStatus(s);
  Annotate(context, [&](logging::RequestRecord* r) {
    r->session = request->session_id();
    r->prompt = request->prompt();  // written only with --log-prompts
  });
  runtime::TurnRequest turn_request;
  turn_request.session_id = request->session_id();
  turn_request.prompt_text = request->prompt();
  turn_request.prompt_ids.assign(request->prompt_token_ids().begin(),
                                 request->prompt_token_ids().end());
  for (const v1::ChatMessage& m : request->messages()) {
    ChatMessage& message = turn_request.messages.emplace_back(m.role(), m.content());
    for (const v1::ToolCall& call : m.tool_calls()) {
      message.tool_calls.push_back({call.name(), call.arguments(), call.id()});
    }
    message.tool_call_id = m.tool_call_id();
  }
  if (!request->tools().empty() && request->messages().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("tools go with messages"));
  }
  turn_request.sampling = FromProto(request->sampling());
  if (request->prompt_logprobs() && !request->echo()) {
    return ToGrpcStatus(absl::InvalidArgumentError("prompt_logprobs needs echo"));
  }
  if (request->prompt_only() &&
      (!request->messages().empty() ||
       (request->prompt().empty() && request->prompt_token_ids().empty()))) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "prompt_only needs a prompt or prompt_token_ids (and no messages)"));
  }
  turn_request.prompt_only = request->prompt_only();
  switch (request->response_format().type()) {
    case v1::ResponseFormat::TYPE_JSON_OBJECT:
      turn_request.response_format.kind = runtime::ResponseFormat::Kind::kJsonObject;
      break;
    case v1::ResponseFormat::TYPE_JSON_SCHEMA:
      turn_request.response_format.kind = runtime::ResponseFormat::Kind::kJsonSchema;
      turn_request.response_format.json_schema = request->response_format().json_schema();
      turn_request.response_format.lenient = request->response_format().lenient();
      break;
    case v1::ResponseFormat::TYPE_CHOICE:
      turn_request.response_format.kind = runtime::ResponseFormat::Kind::kChoice;
      turn_request.response_format.choices.assign(request->response_format().choices().begin(),
                                                  request->response_format().choices().end());
      break;
    case v1::ResponseFormat::TYPE_UNSPECIFIED:
    case v1::ResponseFormat::TYPE_TEXT:
      break;
    default:
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "response_format.type ", request->response_format().type(), " is not a known type")));
  }
  absl::StatusOr<http::ToolSet> tools = ToolsOf(*request);
  if (!tools.ok()) return ToGrpcStatus(tools.status());
  turn_request.tools = tools->Shown();  // as over HTTP: none with MODE_NONE
  if (deps_.chat_template != nullptr)
    tools->style = http::ToolCallStyleOf(deps_.chat_template->format());
  if (tools->choice == http::ToolChoice::kRequired ||
      tools->choice == http::ToolChoice::kFunction) {
    if (turn_request.response_format.kind != runtime::ResponseFormat::Kind::kText) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          "tool_choice MODE_REQUIRED or MODE_FUNCTION sets the answer's format; it cannot be "
          "combined with response_format"));
    }
    absl::StatusOr<http::HeldAnswer> held = http::HeldAnswerSchema(*tools);
    if (!held.ok()) return ToGrpcStatus(held.status());
    turn_request.response_format.kind = runtime::ResponseFormat::Kind::kJsonSchema;
    turn_request.response_format.json_schema = std::move(held->schema);
    turn_request.response_format.grammar = std::move(held->grammar);
  }
  auto top_logprobs = TopLogprobsFromProto(request->logprobs() || request->prompt_logprobs(),
                                           request->top_logprobs());
  if (!top_logprobs.ok()) return ToGrpcStatus(top_logprobs.status());
  turn_request.top_logprobs = request->logprobs() ? *top_logprobs : -1;
  turn_request.prompt_logprobs = request->prompt_logprobs() ? *top_logprobs : -1;
  auto turn = deps_.runtime->StartTurn(*caller, std::move(turn_request));
  if (!turn.ok()) {
    ReportTurn(context, turn.status());
    return Reply(turn.status(), context);
  }

  std::optional<IncrementalDecoder> decoder;
  // Generated text continues the prompt's text: only a turn that starts from BOS alone
  // begins a text (and drops the dummy-prefix space, as Decode does).
  if (deps_.tokenizer != nullptr) decoder.emplace(deps_.tokenizer, (*turn)->starts_text());
  // The echo goes out with the first generated tokens (or the final message), never
  // before admission has accepted the turn.
  bool echo_pending = request->echo() && !(*turn)->prompt_ids().empty();
  auto add_echo = [&]() {
    if (!echo_pending) return;
    echo_pending = false;
    v1::GenerateResponse echo;
    const std::vector<int32_t>& ids = (*turn)->prompt_ids();
    for (int32_t id : ids) echo.mutable_delta()->add_token_ids(id);
    std::vector<engine::TokenLogprobs> scored;
    (*turn)->TakePromptLogprobs(&scored);
    const size_t first = ids.size() - std::min(ids.size(), scored.size());
    for (size_t i = 0; i < scored.size() && first + i < ids.size(); ++i) {
      ToProto(ids[first + i], scored[i], echo.mutable_delta()->add_logprobs());
    }
    if (deps_.tokenizer != nullptr) {
      echo.mutable_delta()->set_text(deps_.tokenizer->Decode((*turn)->prompt_ids()));
    }
    writer->Write(echo);
  };
  // The answer's text, read for calls when the turn ends.
  std::string answer_text;
  bool client_gone = false;
  bool ended = false;
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprobs> logprobs;
  while (!ended) {
    tokens.clear();
    logprobs.clear();
    ended = (*turn)->Wait(absl::Milliseconds(20), &tokens, &logprobs);
    if (!client_gone && CallEnded(context)) {
      client_gone = true;
      (*turn)->Cancel();
    }
    if (tokens.empty() || client_gone) continue;
    v1::GenerateResponse response;
    for (int32_t id : tokens) {
      response.mutable_delta()->add_token_ids(id);
      if (decoder.has_value()) response.mutable_delta()->mutable_text()->append(decoder->Push(id));
    }
    if (tools->active()) answer_text += response.delta().text();
    for (size_t i = 0; i < logprobs.size() && i < tokens.size(); ++i) {
      ToProto(tokens[i], logprobs[i], response.mutable_delta()->add_logprobs());
    }
    add_echo();
    writer->Write(response);
  }
  absl::StatusOr<runtime::TurnUsage> usage = (*turn)->Finish();
  ReportTurn(context, usage);
  if (client_gone) {
    // A cancelled turn is never committed.
    if (context->deadline() < std::chrono::system_clock::now()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline passed during the turn");
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
  }
  if (!usage.ok()) return Reply(usage.status(), context);
  add_echo();
  v1::GenerateResponse final_response;
  if (decoder.has_value()) {
    std::string tail = decoder->Flush();
    answer_text += tail;
    if (!tail.empty()) {
      v1::GenerateResponse delta;
      delta.mutable_delta()->set_text(tail);
      writer->Write(delta);
    }
  }
  v1::GenerateFinal* final_message = final_response.mutable_final();
  final_message->set_finish_reason(ToProto(usage->finish_reason));
  if (tools->active()) {
    http::ToolAnswer read = http::ReadToolAnswer(answer_text, *tools);
    if (!read.calls.empty()) {
      final_message->set_finish_reason(v1::FINISH_REASON_TOOL_CALLS);
      final_message->set_content(std::move(read.content));
      for (const http::ToolCallOut& call : read.calls) {
        v1::ToolCall* out = final_message->add_tool_calls();
        out->set_id(call.id);
        out->set_name(call.name);
        out->set_arguments(call.arguments);
      }
    }
  }
  for (const std::string& skipped : usage->schema_skipped) {
    final_message->add_schema_skipped(skipped);
  }
  FillUsage(*usage, replica_name_, final_message->mutable_usage());
  writer->Write(final_response);
  return grpc::Status::OK;
}

}  // namespace kvfold::service
