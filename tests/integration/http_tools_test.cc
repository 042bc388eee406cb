// Function calling through real replicas (stories260K, whose plain chat family shows the
// tools): tool_choice required and a named function answer with calls of the offered
// tools, whole and streamed; auto reads the <tool_call> blocks the model writes (held to a
// guided choice here, since the tiny model never writes one by itself) and streams the
// content before them; tool results continue a stored session on the other replica and an
// ephemeral conversation; bad tools are 400s naming the field. A replica whose model
// directory carries a Llama 3.1 chat template renders the tools in its form and reads a
// call written as the whole answer.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/inference_svc/tokenizer/test_util.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using ::testing::HasSubstr;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
      "city": {"enum": ["Paris", "Oslo"]},
      "days": {"type": "integer", "description": "How many days ahead."}},
      "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time",
    "parameters": {"type": "object", "properties": {"zone": {"enum": ["CET", "UTC"]}},
      "required": ["zone"], "additionalProperties": false}}}])");

ojson ToolChat() {
  ojson chat = ojson::parse(kChat.dump());
  chat["messages"] = {{{"role", "user"}, {"content", "What is the weather in Paris?"}}};
  chat["tools"] = kTools;
  chat["max_tokens"] = 120;
  return chat;
}

// `call` is a call of one of kTools with arguments its schema admits; returns its name.
std::string ExpectCall(const json& call) {
  EXPECT_EQ(call["type"], "function") << call;
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_")) << call;
  const std::string name = call["function"]["name"];
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  if (name == "get_weather") {
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Oslo") << call;
    for (const auto& [key, value] : args.items()) {
      EXPECT_TRUE(key == "city" || key == "days") << call;
    }
  } else {
    EXPECT_EQ(name, "get_time") << call;
    EXPECT_TRUE(args["zone"] == "CET" || args["zone"] == "UTC") << call;
  }
  return name;
}

// A streamed chat answer of one choice: its content joined, the calls of its tool-call
// delta, its finish reason.
struct Streamed {
  std::string content, finish;
  int content_chunks = 0;  // deltas with non-empty content
  json calls = json::array();
};

Streamed ReadStream(const HttpReply& reply) {
  Streamed out;
  for (const std::string& e : reply.Events()) {
    if (e == "[DONE]") continue;
    const json c = json::parse(e)["choices"][0];
    if (c["delta"].contains("content") && c["delta"]["content"].is_string()) {
      const std::string piece = c["delta"]["content"];
      out.content += piece;
      out.content_chunks += piece.empty() ? 0 : 1;
    }
    if (c["delta"].contains("tool_calls")) out.calls = c["delta"]["tool_calls"];
    if (!c["finish_reason"].is_null()) out.finish = c["finish_reason"];
  }
  return out;
}

TEST_F(HttpApiTest, ToolChoiceRequiredAnswersWithCalls) {
  ojson chat = ToolChat();
  chat["tool_choice"] = "required";
  chat["parallel_tool_calls"] = false;  // one call: the tiny model would go on adding calls
  chat["temperature"] = 1.0;
  chat["seed"] = 11;
  chat["n"] = 3;
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  ASSERT_EQ(body["choices"].size(), 3u);
  for (const json& choice : body["choices"]) {
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice;
    EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
    ExpectCall(choice["message"]["tool_calls"][0]);
  }

  // With parallel calls, an answer either closes its list (calls) or runs out of tokens
  // mid-list: then it has no calls and its text is the content, as written.
  chat["n"] = 2;
  chat.erase("parallel_tool_calls");
  r = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  // The body outlives the loop (a temporary's member would not).
  const json choices = Body(r)["choices"];
  for (const json& choice : choices) {
    if (choice["finish_reason"] == "tool_calls") {
      for (const json& call : choice["message"]["tool_calls"]) ExpectCall(call);
    } else {
      EXPECT_EQ(choice["finish_reason"], "length") << choice;
      EXPECT_FALSE(choice["message"].contains("tool_calls")) << choice;
      EXPECT_THAT(choice["message"]["content"].get<std::string>(), HasSubstr("[{\"name\": "));
    }
  }

  // Streamed: no content, one delta with the calls, then finish_reason tool_calls.
  chat["n"] = 1;
  chat["parallel_tool_calls"] = false;
  chat["stream"] = true;
  HttpReply s = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  int call_chunks = 0;
  std::string finish;
  for (const std::string& e : s.Events()) {
    if (e == "[DONE]") continue;
    const json delta = json::parse(e)["choices"][0]["delta"];
    const json reason = json::parse(e)["choices"][0]["finish_reason"];
    if (!reason.is_null()) finish = reason;
    EXPECT_TRUE(!delta.contains("content") || delta["content"].is_null() || delta["content"] == "")
        << e;
    if (delta.contains("tool_calls")) {
      ++call_chunks;
      EXPECT_EQ(delta["tool_calls"][0]["index"], 0);
      ExpectCall(delta["tool_calls"][0]);
    }
  }
  EXPECT_EQ(call_chunks, 1);
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(HttpApiTest, NamedToolChoiceCallsThatFunction) {
  ojson chat = ToolChat();
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  HttpReply r = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = Body(r)["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(ExpectCall(choice["message"]["tool_calls"][0]), "get_time");
}

TEST_F(HttpApiTest, AutoReadsTheCallsTheModelWrites) {
  const std::string call =
      R"(<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>)";
  ojson chat = ToolChat();
  chat["guided_choice"] = {"Let me see. " + call};
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  json choice = Body(r)["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice;
  EXPECT_EQ(choice["message"]["content"], "Let me see. ");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"zone":"UTC"})");

  // Streamed: the content before the tag goes out as text, the call after it.
  chat["stream"] = true;
  HttpReply s = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  const Streamed streamed = ReadStream(s);
  const std::string& content = streamed.content;
  const json& calls = streamed.calls;
  const std::string& finish = streamed.finish;
  EXPECT_EQ(content, "Let me see. ");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_time");
  EXPECT_EQ(finish, "tool_calls");

  // tool_choice none: the same text is content.
  chat["stream"] = false;
  chat["tool_choice"] = "none";
  r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  choice = Body(r)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["message"]["content"], "Let me see. " + call);
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
}

TEST_F(HttpApiTest, ToolResultsContinueTheConversation) {
  // A stored session: the call on one replica, its result on the other.
  ojson chat = ToolChat();
  chat["kvfold_session"] = "http-tools";
  chat["tool_choice"] = "required";
  chat["parallel_tool_calls"] = false;
  HttpReply first = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(first.status, 200) << first.body;
  const json call = Body(first)["choices"][0]["message"]["tool_calls"][0];
  ExpectCall(call);
  chat.erase("tool_choice");
  chat["max_tokens"] = 6;
  chat["messages"] = {
      {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "Sunny, 21 C."}}};
  HttpReply second = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(second.status, 200) << second.body;
  const json answer = Body(second);
  EXPECT_EQ(answer["usage"]["completion_tokens"], 6);
  EXPECT_GT(answer["usage"]["prompt_tokens"], 4);

  // An ephemeral conversation sends the whole exchange back.
  ojson again = ToolChat();
  again["max_tokens"] = 6;
  again["messages"].push_back(
      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}});
  again["messages"].push_back(
      {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "Sunny, 21 C."}});
  HttpReply whole = HttpCall(port_[0], "POST", "/v1/chat/completions", again.dump(), kAuth);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(Body(whole)["usage"]["completion_tokens"], 6);
}

// OpenAI's deprecated `functions` / `function_call`: a named function's call answered as
// `message.function_call` (finish_reason "function_call"), whole and streamed, and its
// result sent back as a `function` message, in a stored session on the other replica and
// in an ephemeral conversation.
TEST_F(HttpApiTest, DeprecatedFunctionsCallAndTakeResults) {
  ojson chat = ToolChat();
  chat.erase("tools");
  chat["functions"] = ojson::array();
  for (const ojson& t : kTools) chat["functions"].push_back(t["function"]);
  chat["function_call"] = {{"name", "get_weather"}};
  chat["kvfold_session"] = "http-functions";
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = Body(r)["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "function_call") << choice;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
  EXPECT_FALSE(choice["message"].contains("tool_calls")) << choice;
  const json call = choice["message"]["function_call"];
  ASSERT_EQ(call["name"], "get_weather") << choice;
  ExpectCall({{"type", "function"}, {"id", "call_x"}, {"function", call}});

  // The result, on the other replica: the session holds the call.
  chat.erase("function_call");
  chat["max_tokens"] = 6;
  chat["messages"] = {{{"role", "function"}, {"name", "get_weather"}, {"content", "Sunny."}}};
  HttpReply result = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(result.status, 200) << result.body;
  EXPECT_EQ(Body(result)["usage"]["completion_tokens"], 6);
  EXPECT_EQ(Body(result)["choices"][0]["finish_reason"], "length");

  // Ephemeral and streamed: the whole exchange renders as the tools' form renders it.
  ojson again = ToolChat();
  again.erase("tools");
  again["functions"] = chat["functions"];
  again["function_call"] = {{"name", "get_time"}};
  again["stream"] = true;
  HttpReply s = HttpCall(port_[1], "POST", "/v1/chat/completions", again.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  json streamed_call;
  std::string finish;
  for (const std::string& e : s.Events()) {
    if (e == "[DONE]") continue;
    const json c = json::parse(e)["choices"][0];
    EXPECT_FALSE(c["delta"].contains("tool_calls")) << e;
    if (c["delta"].contains("function_call")) streamed_call = c["delta"]["function_call"];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_EQ(finish, "function_call");
  ASSERT_EQ(streamed_call["name"], "get_time") << s.body;
  ExpectCall({{"type", "function"}, {"id", "call_x"}, {"function", streamed_call}});
  again.erase("stream");
  again.erase("function_call");
  again["max_tokens"] = 6;
  again["messages"].push_back(
      {{"role", "assistant"}, {"content", nullptr}, {"function_call", streamed_call}});
  again["messages"].push_back({{"role", "function"}, {"name", "get_time"}, {"content", "12:00"}});
  HttpReply whole = HttpCall(port_[0], "POST", "/v1/chat/completions", again.dump(), kAuth);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(Body(whole)["usage"]["completion_tokens"], 6);
  // The same conversation in the tools' form feeds the same prompt.
  ojson as_tools = ToolChat();
  as_tools["max_tokens"] = 6;
  as_tools["messages"].push_back(
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls", {{{"id", "call_1"}, {"type", "function"}, {"function", streamed_call}}}}});
  as_tools["messages"].push_back(
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "12:00"}});
  HttpReply tools_form = HttpCall(port_[0], "POST", "/v1/chat/completions", as_tools.dump(), kAuth);
  ASSERT_EQ(tools_form.status, 200) << tools_form.body;
  EXPECT_EQ(Body(tools_form)["usage"]["prompt_tokens"], Body(whole)["usage"]["prompt_tokens"]);
}

TEST_F(HttpApiTest, ResponsesCallFunctionsAndTakeTheirOutput) {
  ojson request = {{"model", "stories260K"},    {"input", "What is the weather in Oslo?"},
                   {"max_output_tokens", 120},  {"temperature", 0},
                   {"tool_choice", "required"}, {"parallel_tool_calls", false},
                   {"tools", ojson::array()}};
  for (const ojson& t : kTools) {  // the Responses form: the function's fields flat
    ojson flat = {{"type", "function"}};
    for (const auto& [key, value] : t["function"].items()) flat[key] = value;
    request["tools"].push_back(flat);
  }
  HttpReply r = HttpCall(port_[0], "POST", "/v1/responses", request.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  const json first = Body(r);
  ASSERT_EQ(first["output"].size(), 1u) << first;
  const json& item = first["output"][0];
  ASSERT_EQ(item["type"], "function_call") << first;
  ExpectCall({{"id", item["call_id"]},
              {"type", "function"},
              {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
  // It reads back as created, the call's id with it.
  HttpReply kept =
      HttpCall(port_[1], "GET", "/v1/responses/" + first["id"].get<std::string>(), "", kAuth);
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(Body(kept), first);

  // The output of the call continues the chain, on the other replica.
  ojson next = {{"model", "stories260K"},
                {"previous_response_id", first["id"]},
                {"max_output_tokens", 6},
                {"tools", request["tools"]},
                {"input",
                 {{{"type", "function_call_output"},
                   {"call_id", item["call_id"]},
                   {"output", "Snow, -3 C."}}}}};
  HttpReply second = HttpCall(port_[1], "POST", "/v1/responses", next.dump(), kAuth);
  ASSERT_EQ(second.status, 200) << second.body;
  const json answer = Body(second);
  EXPECT_EQ(answer["previous_response_id"], first["id"]);
  EXPECT_EQ(answer["usage"]["output_tokens"], 6);
  // Its input item is the call's output, as given, with an id.
  HttpReply items =
      HttpCall(port_[0], "GET", "/v1/responses/" + answer["id"].get<std::string>() + "/input_items",
               "", kAuth);
  ASSERT_EQ(items.status, 200) << items.body;
  ojson item0 = next["input"][0];
  item0["id"] = "item_0";
  EXPECT_EQ(Body(items)["data"], json::array({json::parse(item0.dump())}));

  // Streamed: the call comes as a function_call item after the (empty) message item.
  request["stream"] = true;
  HttpReply streamed = HttpCall(port_[1], "POST", "/v1/responses", request.dump(), kAuth);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  json completed, arguments_done;
  for (const std::string& e : streamed.Events()) {
    const json event = json::parse(e);
    EXPECT_NE(event["type"], "response.output_text.delta") << e;  // the call is held back
    if (event["type"] == "response.completed") completed = event["response"];
    if (event["type"] == "response.function_call_arguments.done") arguments_done = event;
  }
  ASSERT_EQ(completed["output"].size(), 2u) << streamed.body;
  const json& call = completed["output"][1];
  ASSERT_EQ(call["type"], "function_call");
  EXPECT_EQ(arguments_done["arguments"], call["arguments"]);
  ExpectCall({{"id", call["call_id"]},
              {"type", "function"},
              {"function", {{"name", call["name"]}, {"arguments", call["arguments"]}}}});
  // Read back, it is the unstreamed form: the call alone, no empty message item.
  HttpReply streamed_kept =
      HttpCall(port_[0], "GET", "/v1/responses/" + completed["id"].get<std::string>(), "", kAuth);
  ASSERT_EQ(streamed_kept.status, 200) << streamed_kept.body;
  json unstreamed_form = completed;
  unstreamed_form["output"].erase(0);
  EXPECT_EQ(Body(streamed_kept), unstreamed_form);
}

TEST_F(HttpApiTest, TokenizeCountsTheToolsAChatTurnShows) {
  ojson chat = ToolChat();
  chat["max_tokens"] = 2;
  HttpReply turn = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(turn.status, 200) << turn.body;
  const ojson tokenize = {{"messages", chat["messages"]}, {"tools", kTools}};
  HttpReply with_tools = HttpCall(port_[1], "POST", "/tokenize", tokenize.dump(), kAuth);
  ASSERT_EQ(with_tools.status, 200) << with_tools.body;
  EXPECT_EQ(Body(with_tools)["count"], Body(turn)["usage"]["prompt_tokens"]);
  ojson bare = tokenize;
  bare.erase("tools");
  HttpReply without = HttpCall(port_[1], "POST", "/tokenize", bare.dump(), kAuth);
  ASSERT_EQ(without.status, 200) << without.body;
  EXPECT_LT(Body(without)["count"].get<int>() + 50, Body(with_tools)["count"].get<int>());
  const ojson prompt_and_tools = {{"prompt", "x"}, {"tools", kTools}};
  HttpReply refused = HttpCall(port_[1], "POST", "/tokenize", prompt_and_tools.dump(), kAuth);
  EXPECT_EQ(refused.status, 400) << refused.body;
}

TEST_F(HttpApiTest, GrpcMessagesCarryToolsCallsAndResults) {
  // The same conversation over HTTP's /tokenize and gRPC's Generate: the same prompt.
  const ojson messages = {
      {{"role", "user"}, {"content", "Time in Paris?"}},
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls",
        {{{"id", "c1"},
          {"type", "function"},
          {"function", {{"name", "get_time"}, {"arguments", R"({"zone":"CET"})"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "12:00"}}};
  HttpReply tokenized = HttpCall(port_[0], "POST", "/tokenize",
                                 ojson{{"messages", messages}, {"tools", kTools}}.dump(), kAuth);
  ASSERT_EQ(tokenized.status, 200) << tokenized.body;

  auto generate = [&](const std::string& session, const std::string& arguments,
                      uint32_t* prompt_tokens) {
    EXPECT_TRUE(CreateGrpcSession(1, session).ok());
    grpc::ClientContext context;
    Authorize(&context);
    v1::GenerateRequest request;
    request.set_session_id(session);
    request.mutable_sampling()->set_max_new_tokens(2);
    for (const ojson& t : kTools) request.add_tools(t.dump());
    v1::ChatMessage* user = request.add_messages();
    user->set_role("user");
    user->set_content("Time in Paris?");
    v1::ChatMessage* assistant = request.add_messages();
    assistant->set_role("assistant");
    v1::ToolCall* call = assistant->add_tool_calls();
    call->set_name("get_time");
    call->set_arguments(arguments);
    v1::ChatMessage* result = request.add_messages();
    result->set_role("tool");
    result->set_content("12:00");
    auto reader = cluster_->stub(1).Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_final()) *prompt_tokens = response.final().usage().prompt_tokens();
    }
    return reader->Finish();
  };
  uint32_t prompt_tokens = 0;
  grpc::Status ok = generate("grpc-tools", R"({"zone":"CET"})", &prompt_tokens);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(prompt_tokens, Body(tokenized)["count"]);
  grpc::Status bad = generate("grpc-tools-bad", "{zone", &prompt_tokens);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("arguments is not JSON text"));
}

// A gRPC chat turn with kTools on a new session: the deltas' text joined and the final
// message.
struct GrpcAnswer {
  grpc::Status status;
  std::string text;
  v1::GenerateFinal final;
};

GrpcAnswer GrpcToolTurn(v1::InferenceService::Stub& stub, const std::string& session,
                        v1::GenerateRequest request) {
  GrpcAnswer answer;
  {
    grpc::ClientContext context;
    Authorize(&context);
    v1::CreateSessionRequest create;
    create.set_session_id(session);
    v1::Session created;
    answer.status = stub.CreateSession(&context, create, &created);
    if (!answer.status.ok()) return answer;
  }
  grpc::ClientContext context;
  Authorize(&context);
  request.set_session_id(session);
  if (request.tools().empty()) {
    for (const ojson& t : kTools) request.add_tools(t.dump());
  }
  if (request.messages().empty()) {
    v1::ChatMessage* user = request.add_messages();
    user->set_role("user");
    user->set_content("What is the weather in Paris?");
  }
  if (request.sampling().max_new_tokens() == 0) request.mutable_sampling()->set_max_new_tokens(120);
  request.mutable_sampling()->set_top_k(1);  // greedy
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    answer.text += response.delta().text();
    if (response.has_final()) answer.final = response.final();
  }
  answer.status = reader->Finish();
  return answer;
}

TEST_F(HttpApiTest, GrpcAnswersCarryTheCallsTheyMake) {
  // tool_choice required, one call: the same call as the HTTP API's greedy answer.
  v1::GenerateRequest request;
  request.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_REQUIRED);
  request.mutable_tool_choice()->set_single_call(true);
  GrpcAnswer required = GrpcToolTurn(cluster_->stub(0), "grpc-required", request);
  ASSERT_TRUE(required.status.ok()) << required.status.error_message();
  EXPECT_EQ(required.final.finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  EXPECT_EQ(required.final.content(), "");
  ASSERT_EQ(required.final.tool_calls_size(), 1) << required.text;
  const v1::ToolCall& call = required.final.tool_calls(0);
  ExpectCall({{"id", call.id()},
              {"type", "function"},
              {"function", {{"name", call.name()}, {"arguments", call.arguments()}}}});
  EXPECT_THAT(required.text, HasSubstr(call.name()));  // the deltas carried the text
  ojson chat = ToolChat();
  chat["tool_choice"] = "required";
  chat["parallel_tool_calls"] = false;
  HttpReply http = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(http.status, 200) << http.body;
  const json http_call = Body(http)["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(http_call["function"]["name"], call.name());
  EXPECT_EQ(http_call["function"]["arguments"], call.arguments());
  EXPECT_EQ(Body(http)["usage"]["prompt_tokens"], required.final.usage().prompt_tokens());

  // A named function.
  request.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_FUNCTION);
  request.mutable_tool_choice()->set_function("get_time");
  GrpcAnswer named = GrpcToolTurn(cluster_->stub(1), "grpc-named", request);
  ASSERT_TRUE(named.status.ok()) << named.status.error_message();
  ASSERT_EQ(named.final.tool_calls_size(), 1) << named.text;
  EXPECT_EQ(named.final.tool_calls(0).name(), "get_time");
  EXPECT_TRUE(named.final.tool_calls(0).id().starts_with("call_"));
  EXPECT_NE(named.final.tool_calls(0).id(), call.id());

  // Unset (auto): the calls the model writes are read, the text before them is the
  // content; MODE_NONE leaves the same text as text.
  const std::string written =
      R"(Let me see. <tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>)";
  v1::GenerateRequest automatic;
  automatic.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_CHOICE);
  automatic.mutable_response_format()->add_choices(written);
  GrpcAnswer read = GrpcToolTurn(cluster_->stub(0), "grpc-auto", automatic);
  ASSERT_TRUE(read.status.ok()) << read.status.error_message();
  EXPECT_EQ(read.text, written);
  EXPECT_EQ(read.final.finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  EXPECT_EQ(read.final.content(), "Let me see. ");
  ASSERT_EQ(read.final.tool_calls_size(), 1);
  EXPECT_EQ(read.final.tool_calls(0).name(), "get_time");
  EXPECT_EQ(read.final.tool_calls(0).arguments(), R"({"zone":"UTC"})");
  automatic.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_NONE);
  GrpcAnswer none = GrpcToolTurn(cluster_->stub(1), "grpc-none", automatic);
  ASSERT_TRUE(none.status.ok()) << none.status.error_message();
  EXPECT_EQ(none.text, written);
  EXPECT_EQ(none.final.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(none.final.tool_calls_size(), 0);
  EXPECT_EQ(none.final.content(), "");
  // MODE_NONE shows no tools, as tool_choice "none" does over HTTP.
  HttpReply bare = HttpCall(port_[0], "POST", "/tokenize",
                            ojson{{"messages", ToolChat()["messages"]}}.dump(), kAuth);
  ASSERT_EQ(bare.status, 200) << bare.body;
  EXPECT_EQ(none.final.usage().prompt_tokens(), Body(bare)["count"]);
  EXPECT_GT(read.final.usage().prompt_tokens(), none.final.usage().prompt_tokens() + 50);
}

TEST_F(HttpApiTest, GrpcToolChoicesAreChecked) {
  auto refused = [&](const std::string& session, v1::GenerateRequest request,
                     const std::string& text) {
    GrpcAnswer a = GrpcToolTurn(cluster_->stub(0), session, std::move(request));
    EXPECT_EQ(a.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << session;
    EXPECT_THAT(a.status.error_message(), HasSubstr(text)) << session;
  };
  v1::GenerateRequest request;
  request.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_FUNCTION);
  request.mutable_tool_choice()->set_function("get_mood");
  refused("grpc-bad-1", request, "'get_mood', which is not among 'tools'");
  request.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_AUTO);
  refused("grpc-bad-2", request, "tool_choice.function goes with MODE_FUNCTION");
  request.mutable_tool_choice()->set_function("");
  request.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_FUNCTION);
  refused("grpc-bad-3", request, "needs tool_choice.function");
  request.mutable_tool_choice()->set_mode(static_cast<v1::ToolChoice::Mode>(9));
  refused("grpc-bad-4", request, "not a known mode");
  request.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_REQUIRED);
  request.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_JSON_OBJECT);
  refused("grpc-bad-5", request, "cannot be combined with response_format");
  request.clear_response_format();
  request.add_tools("{\"type\": \"function\"");
  refused("grpc-bad-6", request, "tools[0] is not JSON text");
  request.clear_tools();
  request.add_tools(R"({"type": "function", "function": {"name": "a b"}})");
  refused("grpc-bad-7", request, "tools[0].function.name");
  request.clear_tools();
  request.add_tools(kTools[0].dump());
  request.add_tools(kTools[0].dump());
  refused("grpc-bad-8", request, "offered twice");
  // With tool_choice required a parameters schema outside the structured subset is
  // refused.
  request.clear_tools();
  ojson outside = kTools[1];
  outside["function"]["parameters"]["properties"]["zone"] = {{"contains", {{"type", "integer"}}}};
  request.add_tools(outside.dump());
  refused("grpc-bad-9", request, "keyword 'contains' is not supported");
  // A choice other than none needs tools.
  v1::GenerateRequest bare;
  bare.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_REQUIRED);
  v1::ChatMessage* user = bare.add_messages();
  user->set_role("user");
  user->set_content("Hi");
  grpc::ClientContext context;
  Authorize(&context);
  ASSERT_TRUE(CreateGrpcSession(0, "grpc-bad-10").ok());
  bare.set_session_id("grpc-bad-10");
  auto reader = cluster_->stub(0).Generate(&context, bare);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("needs 'tools'"));
}

// A tool with `strict: false` whose parameters hold what the structured subset cannot:
// under tool_choice required its parameters are held leniently (the rest exactly), what
// is read past is named in X-Kvfold-Schema-Skipped (HTTP) and GenerateFinal.schema_skipped
// (gRPC); without `strict: false` the request is refused.
TEST_F(HttpApiTest, LenientToolsAreHeldWhereTheyCanBe) {
  const ojson tag = ojson::parse(R"j({"type": "function", "function": {"name": "tag_day",
      "strict": false, "parameters": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3,
                 "uniqueItems": true, "contains": {"const": "sun"}}},
      "required": ["tags"], "additionalProperties": false}}})j");
  const std::vector<std::string> skipped = {
      "contains at '/properties/tags' in tools[2].function.parameters"};
  const auto expect_calls = [](const json& calls) {
    for (const json& call : calls) {
      if (call["function"]["name"] != "tag_day") {
        ExpectCall(call);
        continue;
      }
      const json args = json::parse(call["function"]["arguments"].get<std::string>());
      ASSERT_TRUE(args["tags"].is_array()) << call;
      EXPECT_LE(args["tags"].size(), 3u) << call;
      EXPECT_EQ(args.size(), 1u) << call;
      const std::set<json> distinct(args["tags"].begin(), args["tags"].end());
      EXPECT_EQ(distinct.size(), args["tags"].size()) << call;  // uniqueItems, held
      for (const json& t : args["tags"]) {
        const std::string text = t.get<std::string>();
        EXPECT_LE(
            std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }), 8)
            << call;
      }
    }
  };
  ojson chat = ToolChat();
  chat["tools"].push_back(tag);
  chat["tool_choice"] = "required";
  chat["parallel_tool_calls"] = false;
  chat["temperature"] = 1.0;
  chat["seed"] = 5;
  chat["n"] = 4;
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.Header("X-Kvfold-Schema-Skipped")), json(skipped));
  const json choices = Body(r)["choices"];
  for (const json& choice : choices) {
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice;
    expect_calls(choice["message"]["tool_calls"]);
  }
  // Named, the lenient function's arguments are the whole answer.
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", "tag_day"}}}};
  chat["n"] = 1;
  chat["stream"] = true;
  HttpReply s = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(json::parse(s.Header("X-Kvfold-Schema-Skipped")), json(skipped));
  const Streamed streamed = ReadStream(s);
  EXPECT_EQ(streamed.finish, "tool_calls") << s.body;
  ASSERT_EQ(streamed.calls.size(), 1u) << s.body;
  expect_calls(streamed.calls);
  // Strict tools in the same request send no header.
  chat.erase("stream");
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("X-Kvfold-Schema-Skipped"), "");
  // Without `strict: false`, refused naming the tool.
  chat["tools"][2]["function"].erase("strict");
  chat["tool_choice"] = "required";
  r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Body(r)["error"]["param"], "tools");
  EXPECT_THAT(r.body, HasSubstr("tools[2].function.parameters"));

  // gRPC: the same tools, MODE_REQUIRED.
  v1::GenerateRequest request;
  for (const ojson& t : kTools) request.add_tools(t.dump());
  request.add_tools(tag.dump());
  request.mutable_tool_choice()->set_mode(v1::ToolChoice::MODE_REQUIRED);
  request.mutable_tool_choice()->set_single_call(true);
  GrpcAnswer a = GrpcToolTurn(cluster_->stub(1), "grpc-lenient-tools", request);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(
      std::vector<std::string>(a.final.schema_skipped().begin(), a.final.schema_skipped().end()),
      skipped);
  EXPECT_EQ(a.final.finish_reason(), v1::FINISH_REASON_TOOL_CALLS) << a.text;
}

// JSON nested a million levels deep in a body, in a tool, in a call's arguments or in a
// schema is a precise refusal on both APIs, and the replica serves on (it overflowed the
// stack of the thread that walked it).
TEST_F(HttpApiTest, DeeplyNestedJsonIsRefusedAndTheReplicaServesOn) {
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  ojson chat = ToolChat();
  const std::string body = chat.dump();
  const std::string nested_body =
      body.substr(0, body.size() - 1) + R"(, "metadata": )" + deep + "}";
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", nested_body, kAuth);
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_THAT(r.body, HasSubstr("nests arrays and objects deeper than 100 levels"));
  chat["messages"].push_back({{"role", "assistant"},
                              {"tool_calls",
                               {{{"id", "c"},
                                 {"type", "function"},
                                 {"function", {{"name", "get_time"}, {"arguments", deep}}}}}}});
  r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
  EXPECT_EQ(Body(r)["error"]["param"], "messages[1].tool_calls[0].function.arguments");

  v1::GenerateRequest request;
  request.add_tools(deep);
  GrpcAnswer tools = GrpcToolTurn(cluster_->stub(1), "grpc-deep-tools", request);
  EXPECT_EQ(tools.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(tools.status.error_message(),
            "tools[0] nests arrays and objects deeper than 100 levels");
  v1::GenerateRequest call;
  v1::ChatMessage* user = call.add_messages();
  user->set_role("user");
  user->set_content("Time?");
  v1::ChatMessage* assistant = call.add_messages();
  assistant->set_role("assistant");
  v1::ToolCall* made = assistant->add_tool_calls();
  made->set_name("get_time");
  // Within the prompt's byte limit (2 MB would be refused for its size first).
  made->set_arguments(std::string(300000, '[') + std::string(300000, ']'));
  GrpcAnswer arguments = GrpcToolTurn(cluster_->stub(1), "grpc-deep-arguments", call);
  EXPECT_EQ(arguments.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(arguments.status.error_message(), HasSubstr("nests arrays and objects deeper"));
  v1::GenerateRequest schema;
  schema.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_JSON_SCHEMA);
  schema.mutable_response_format()->set_json_schema(R"({"x": )" + deep + "}");
  GrpcAnswer compiled = GrpcToolTurn(cluster_->stub(1), "grpc-deep-schema", schema);
  EXPECT_EQ(compiled.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(compiled.status.error_message(), HasSubstr("the schema nests arrays and objects"));

  // Both replicas answer on.
  for (int replica : {0, 1}) {
    HttpReply after = HttpCall(port_[replica], "POST", "/v1/chat/completions", kChat.dump(), kAuth);
    EXPECT_EQ(after.status, 200) << after.body;
  }
}

TEST_F(HttpApiTest, BadToolsAreRefusedNamingTheField) {
  auto refused = [&](ojson body, const std::string& param, const std::string& text) {
    HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", body.dump(), kAuth);
    EXPECT_EQ(r.status, 400) << r.body;
    const json error = Body(r)["error"];
    EXPECT_EQ(error["param"], param) << r.body;
    EXPECT_THAT(error["message"].get<std::string>(), HasSubstr(text)) << r.body;
  };
  ojson chat = ToolChat();
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_mood"}}}};
  refused(chat, "tool_choice", "'get_mood', which is not among 'tools'");
  chat = ToolChat();
  chat["tools"][0]["function"]["name"] = "get weather";
  refused(chat, "tools", "tools[0].function.name");
  chat = ToolChat();
  chat["tool_choice"] = "required";
  chat["response_format"] = {{"type", "json_object"}};
  refused(chat, "tool_choice", "cannot be combined");
  chat = ToolChat();
  chat["messages"].push_back({{"role", "assistant"},
                              {"tool_calls",
                               {{{"id", "c"},
                                 {"type", "function"},
                                 {"function", {{"name", "get_time"}, {"arguments", "{zone"}}}}}}});
  refused(chat, "messages[1].tool_calls[0].function.arguments", "arguments is not JSON text");
  // With tool_choice required, a parameters schema outside the structured-output subset
  // is refused; auto takes it (nothing is held to it).
  chat = ToolChat();
  chat["tool_choice"] = "required";
  chat["tools"][1]["function"]["parameters"]["properties"]["zone"] = {
      {"contains", {{"type", "integer"}}}};
  refused(chat, "tools",
          "tools[1].function.parameters: schema at '/properties/zone': keyword "
          "'contains' is not supported");
  chat.erase("tool_choice");
  chat["max_tokens"] = 4;
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  EXPECT_EQ(r.status, 200) << r.body;
}

// One replica of stories260K whose model directory holds a byte-level tokenizer.json with
// a chat family's special tokens and a tokenizer_config.json whose chat template is
// detected as that family's (kvfold renders the families natively, so the markers that
// detection reads are all the template needs). `Family` gives Specials(), kTemplate, kBos
// and kEos.
template <class Family>
class FamilyReplicaTest : public ::testing::Test {
 protected:
  static std::string ByteLevelTokenizerJson() {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;  // GPT-2's byte characters
    json added = json::array();
    const std::vector<std::string> specials = Family::Specials();
    for (size_t i = 0; i < specials.size(); ++i) {
      added.push_back({{"id", 256 + i}, {"content", specials[i]}, {"special", true}});
    }
    return json{{"version", "1.0"},
                {"added_tokens", added},
                {"normalizer", nullptr},
                {"pre_tokenizer",
                 {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                {"decoder", {{"type", "ByteLevel"}}},
                {"model",
                 {{"type", "BPE"},
                  {"vocab", vocab},
                  {"merges", json::array()},
                  {"byte_fallback", false},
                  {"ignore_merges", false}}}}
        .dump();
  }

  static void SetUpTestSuite() {
    if (!std::filesystem::exists(SharedModel())) return;
    dir_ = new std::string(MakeTempDir("kvfold-family-"));
    std::filesystem::copy_file(SharedModel(), *dir_ + "/stories260K.bin");
    std::ofstream(*dir_ + "/tokenizer.json") << ByteLevelTokenizerJson();
    std::ofstream(*dir_ + "/tokenizer_config.json") << json{
        {"chat_template", Family::kTemplate},
        {"bos_token", Family::kBos},
        {"eos_token", Family::kEos}}.dump();
    std::ofstream(*dir_ + "/tokens") << kToken << " tenant-a\n";
    cluster_ = new Cluster();
    std::string error;
    if (!cluster_->Setup(1, &error, {"--http-port=0", "--tokens-file=" + *dir_ + "/tokens"},
                         *dir_ + "/stories260K.bin")) {
      error_ = new std::string(error);
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
    delete error_;
    error_ = nullptr;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << MissingShared("models/stories260K/stories260K.bin");
    ASSERT_EQ(error_, nullptr) << *error_;
    port_ = HttpPortOf(cluster_->replica_process(0));
    ASSERT_GT(port_, 0) << cluster_->replica_process(0).output();
  }

  // The chat template the replica renders with.
  static ChatTemplate Template(std::unique_ptr<Tokenizer>* tokenizer) {
    auto loaded = Tokenizer::Load(*dir_ + "/tokenizer.json");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    *tokenizer = std::move(*loaded);
    auto chat = ChatTemplate::ForModel(*dir_, "", tokenizer->get());
    EXPECT_TRUE(chat.ok()) << chat.status();
    return std::move(*chat);
  }

  inline static Cluster* cluster_ = nullptr;
  inline static std::string* dir_ = nullptr;
  inline static std::string* error_ = nullptr;
  int port_ = 0;
};

// Llama 3's special tokens and a template detected as Llama 3.1's.
struct Llama31Family {
  static std::vector<std::string> Specials() {
    return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  }
  static constexpr const char* kTemplate =
      "{# <|start_header_id|> <|eot_id|> Cutting Knowledge Date #}";
  static constexpr const char* kBos = "<|begin_of_text|>";
  static constexpr const char* kEos = "<|eot_id|>";
};
using HttpLlama31ToolsTest = FamilyReplicaTest<Llama31Family>;

// Mistral's v3 control tokens and a template detected as Mistral 7B v0.3's.
struct MistralV3Family {
  static std::vector<std::string> Specials() {
    std::vector<std::string> all = {"<s>", "</s>"};
    all.insert(all.end(), kMistralV3Controls.begin(), kMistralV3Controls.end());
    return all;
  }
  static constexpr const char* kTemplate = "{# [INST] [AVAILABLE_TOOLS] #}";
  static constexpr const char* kBos = "<s>";
  static constexpr const char* kEos = "</s>";
};
using HttpMistralV3ToolsTest = FamilyReplicaTest<MistralV3Family>;

TEST_F(HttpLlama31ToolsTest, ToolsRenderInTheFirstUserMessageAndCallsAreTheWholeAnswer) {
  ojson chat = ToolChat();
  chat["guided_choice"] = {R"({"name": "get_time", "parameters": {"zone": "UTC"}})"};
  HttpReply r = HttpCall(port_, "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  json answer = Body(r);
  json choice = answer["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice;
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"zone":"UTC"})");

  // The replica fed the conversation as Llama 3.1's template shows it with these tools
  // (one id per byte of this tokenizer, one per special string).
  std::unique_ptr<Tokenizer> tokenizer;
  const ChatTemplate llama = Template(&tokenizer);
  ASSERT_EQ(llama.format(), ChatFormat::kLlama31);
  std::vector<std::string> tools;
  for (const ojson& t : kTools) tools.push_back(t.dump());
  auto ids = llama.RenderIds(std::vector<ChatMessage>{{"user", "What is the weather in Paris?"}},
                             {.tools = tools});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(answer["usage"]["prompt_tokens"], ids->size());
  auto text = llama.Render(std::vector<ChatMessage>{{"user", "What is the weather in Paris?"}},
                           {.tools = tools});
  EXPECT_THAT(*text, HasSubstr("Environment: ipython\n"));
  EXPECT_THAT(*text, HasSubstr("{\n    \"type\": \"function\",\n    \"function\": {\n"));

  // Streamed: the call is held back and sent whole; an answer that does not open as a
  // call streams as text.
  chat["stream"] = true;
  HttpReply s = HttpCall(port_, "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  const Streamed streamed = ReadStream(s);
  const std::string& content = streamed.content;
  const json& calls = streamed.calls;
  const std::string& finish = streamed.finish;
  EXPECT_EQ(content, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_time");
  EXPECT_EQ(finish, "tool_calls");

  chat["guided_choice"] = {"It is noon, {not a call}."};
  s = HttpCall(port_, "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  const Streamed free_text = ReadStream(s);
  EXPECT_TRUE(free_text.calls.empty());
  EXPECT_EQ(free_text.content, "It is noon, {not a call}.");
  EXPECT_GT(free_text.content_chunks, 1);  // streamed as it came, not held to the end
  EXPECT_EQ(free_text.finish, "stop");

  // gRPC reads the whole answer as a call in this family too.
  v1::GenerateRequest request;
  request.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_CHOICE);
  request.mutable_response_format()->add_choices(
      R"({"name": "get_time", "parameters": {"zone": "UTC"}})");
  GrpcAnswer grpc_call = GrpcToolTurn(cluster_->stub(0), "llama31-grpc", request);
  ASSERT_TRUE(grpc_call.status.ok()) << grpc_call.status.error_message();
  EXPECT_EQ(grpc_call.final.finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  ASSERT_EQ(grpc_call.final.tool_calls_size(), 1);
  EXPECT_EQ(grpc_call.final.tool_calls(0).arguments(), R"({"zone":"UTC"})");
  EXPECT_EQ(grpc_call.final.usage().prompt_tokens(), ids->size());
}

TEST_F(HttpMistralV3ToolsTest, CallsAreAListWithNineCharacterIdsAndTheirResultsContinue) {
  ojson chat = ToolChat();
  const std::string written = R"( [{"name": "get_time", "arguments": {"zone": "UTC"}}])";
  chat["guided_choice"] = {written};
  HttpReply r = HttpCall(port_, "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  const json answer = Body(r);
  const json choice = answer["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice;
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["arguments"], R"({"zone":"UTC"})");
  const std::string id = call["id"];
  EXPECT_EQ(id.size(), 9u) << id;  // what Mistral's template takes back

  // The replica fed the tools as Mistral v0.3's template shows them, before the user's
  // message.
  std::unique_ptr<Tokenizer> tokenizer;
  const ChatTemplate mistral = Template(&tokenizer);
  ASSERT_EQ(mistral.format(), ChatFormat::kMistralV3);
  std::vector<std::string> tools;
  for (const ojson& t : kTools) tools.push_back(t.dump());
  const std::vector<ChatMessage> asked = {{"user", "What is the weather in Paris?"}};
  auto ids = mistral.RenderIds(asked, {.tools = tools});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(answer["usage"]["prompt_tokens"], ids->size());
  auto text = mistral.Render(asked, {.tools = tools});
  EXPECT_TRUE(
      text->starts_with("<s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": "
                        "{\"name\": \"get_weather\", \"description\": "))
      << *text;
  EXPECT_TRUE(text->ends_with("[/AVAILABLE_TOOLS][INST] What is the weather in Paris?[/INST]"));

  // The call and its result sent back: the ids render; another server's longer id gives
  // its last 9 characters; a shorter one is a 400.
  ojson next = ToolChat();
  next.erase("guided_choice");
  next["max_tokens"] = 4;
  auto with_ids = [&](const std::string& call_id) {
    ojson body = next;
    ojson made = call;
    made["id"] = call_id;
    body["messages"].push_back(
        {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {made}}});
    body["messages"].push_back(
        {{"role", "tool"}, {"tool_call_id", call_id}, {"content", "{\"time\": \"12:00\"}"}});
    return HttpCall(port_, "POST", "/v1/chat/completions", body.dump(), kAuth);
  };
  HttpReply back = with_ids(id);
  ASSERT_EQ(back.status, 200) << back.body;
  std::vector<ChatMessage> round = asked;
  round.push_back({"assistant", "", {{"get_time", R"({"zone": "UTC"})", id}}});
  round.push_back({"tool", "{\"time\": \"12:00\"}"});
  round.back().tool_call_id = id;
  auto round_ids = mistral.RenderIds(round, {.tools = tools});
  ASSERT_TRUE(round_ids.ok()) << round_ids.status();
  EXPECT_EQ(Body(back)["usage"]["prompt_tokens"], round_ids->size());
  HttpReply longer = with_ids("call_0123456789abcdef" + id);
  ASSERT_EQ(longer.status, 200) << longer.body;
  EXPECT_EQ(Body(longer)["usage"]["prompt_tokens"], round_ids->size());
  // The same exchange in the deprecated form names no ids: the call renders with a made-up
  // one of nine characters, and its result with the same.
  ojson legacy = next;
  legacy.erase("tools");
  legacy["functions"] = ojson::array();
  for (const ojson& t : kTools) legacy["functions"].push_back(t["function"]);
  legacy["messages"].push_back(
      {{"role", "assistant"}, {"content", nullptr}, {"function_call", call["function"]}});
  legacy["messages"].push_back(
      {{"role", "function"}, {"name", "get_time"}, {"content", "{\"time\": \"12:00\"}"}});
  HttpReply old_form = HttpCall(port_, "POST", "/v1/chat/completions", legacy.dump(), kAuth);
  ASSERT_EQ(old_form.status, 200) << old_form.body;
  round[1].tool_calls[0].id = "call_0001";
  round[2].tool_call_id = "call_0001";
  auto legacy_ids = mistral.RenderIds(round, {.tools = tools});
  ASSERT_TRUE(legacy_ids.ok()) << legacy_ids.status();
  EXPECT_EQ(Body(old_form)["usage"]["prompt_tokens"], legacy_ids->size());
  HttpReply shorter = with_ids("c1");
  EXPECT_EQ(shorter.status, 400) << shorter.body;
  EXPECT_THAT(shorter.body, HasSubstr("ids of 9 characters"));

  // Streamed: the list is held back and sent as calls; free text streams as it comes.
  chat["stream"] = true;
  HttpReply s = HttpCall(port_, "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  const Streamed streamed = ReadStream(s);
  EXPECT_EQ(streamed.content, "");
  ASSERT_EQ(streamed.calls.size(), 1u);
  EXPECT_EQ(streamed.calls[0]["function"]["name"], "get_time");
  EXPECT_EQ(streamed.calls[0]["id"].get<std::string>().size(), 9u);
  EXPECT_EQ(streamed.finish, "tool_calls");
  chat["guided_choice"] = {"It is noon {not a call}."};
  s = HttpCall(port_, "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  const Streamed free_text = ReadStream(s);
  EXPECT_TRUE(free_text.calls.empty());
  EXPECT_EQ(free_text.content, "It is noon {not a call}.");
  EXPECT_GT(free_text.content_chunks, 1);

  // gRPC reads the same list as a call with a 9-character id.
  v1::GenerateRequest request;
  request.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_CHOICE);
  request.mutable_response_format()->add_choices(written);
  GrpcAnswer grpc_call = GrpcToolTurn(cluster_->stub(0), "mistral-grpc", request);
  ASSERT_TRUE(grpc_call.status.ok()) << grpc_call.status.error_message();
  EXPECT_EQ(grpc_call.final.finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  ASSERT_EQ(grpc_call.final.tool_calls_size(), 1);
  EXPECT_EQ(grpc_call.final.tool_calls(0).id().size(), 9u);
  EXPECT_EQ(grpc_call.final.usage().prompt_tokens(), ids->size());
  // And takes the call back with its id, and the result with tool_call_id.
  v1::GenerateRequest result;
  result.mutable_sampling()->set_max_new_tokens(2);
  v1::ChatMessage* user = result.add_messages();
  user->set_role("user");
  user->set_content("What is the weather in Paris?");
  v1::ChatMessage* assistant = result.add_messages();
  assistant->set_role("assistant");
  *assistant->add_tool_calls() = grpc_call.final.tool_calls(0);
  v1::ChatMessage* tool = result.add_messages();
  tool->set_role("tool");
  tool->set_content("{\"time\": \"12:00\"}");
  tool->set_tool_call_id(grpc_call.final.tool_calls(0).id());
  GrpcAnswer continued = GrpcToolTurn(cluster_->stub(0), "mistral-grpc-result", result);
  ASSERT_TRUE(continued.status.ok()) << continued.status.error_message();
  // The same conversation as over HTTP above (ids of the same length): the same prompt.
  EXPECT_EQ(continued.final.usage().prompt_tokens(), round_ids->size());
  tool->set_tool_call_id("");
  GrpcAnswer missing = GrpcToolTurn(cluster_->stub(0), "mistral-grpc-no-id", result);
  EXPECT_EQ(missing.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(missing.status.error_message(), HasSubstr("ids of 9 characters"));
}

}  // namespace
}  // namespace kvfold::testing
