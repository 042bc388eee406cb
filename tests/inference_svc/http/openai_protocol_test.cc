// OpenAI request parsing (values checked, n > 1 refused), response/error JSON, response
// ids, and stop strings split across token boundaries.
#include "inference_svc/http/openai_protocol.h"

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/http/stop_matcher.h"
#include "inference_svc/http/tool_calls.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/json_matcher.h"
#include "inference_svc/tokenizer/python_json.h"

namespace kvfold::http {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// The `param` of the error JSON a status becomes (null when it names none).
json ParamOf(const absl::Status& status) {
  return json::parse(ErrorJson(status))["error"]["param"];
}

absl::Status ChatError(const json& body) {
  return ParseChatCompletionRequest(body.dump()).status();
}

TEST(OpenAiProtocolTest, ParsesAChatRequest) {
  const json body = {
      {"model", "m"},
      {"messages",
       {{{"role", "developer"}, {"content", "Be brief."}},
        {{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "Hi "}}, {{"type", "text"}, {"text", "there"}}}}}}},
      {"max_completion_tokens", 7},
      {"temperature", 0.5},
      {"top_p", 0.9},
      {"seed", 42},
      {"stop", {"\n", "END"}},
      {"logprobs", true},
      {"top_logprobs", 3},
      {"n", 1},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"kvfold_session", "s1"},
      {"user", "ignored"},
      {"presence_penalty", -0.5},
      {"frequency_penalty", 1.25},
      {"repetition_penalty", 1.1},
      {"top_k", 40},
      {"min_p", 0.05},
      {"logit_bias", {{"42", 2.5}, {"7", -100}}}};
  auto r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[1].content, "Hi there");
  EXPECT_EQ(r->params.max_tokens, 7);
  EXPECT_FLOAT_EQ(*r->params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*r->params.top_p, 0.9f);
  EXPECT_EQ(r->params.seed, 42u);
  EXPECT_EQ(r->params.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r->params.logprobs);
  EXPECT_EQ(r->params.top_logprobs, 3);
  EXPECT_FLOAT_EQ(*r->params.presence_penalty, -0.5f);
  EXPECT_FLOAT_EQ(*r->params.frequency_penalty, 1.25f);
  EXPECT_FLOAT_EQ(*r->params.repetition_penalty, 1.1f);
  EXPECT_EQ(r->params.top_k, 40);
  EXPECT_FLOAT_EQ(*r->params.min_p, 0.05f);
  EXPECT_EQ(r->params.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{7, -100.0f}, {42, 2.5f}}));
  EXPECT_TRUE(r->stream && r->include_usage);
  EXPECT_EQ(r->session, "s1");
}

json with_n(json j, int n) {
  j["n"] = n;
  return j;
}

TEST(OpenAiProtocolTest, RefusesWhatWouldChangeTheAnswer) {
  const json ok = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};
  EXPECT_TRUE(ChatError(ok).ok());
  auto with = [&](const char* key, json value) {
    json j = ok;
    j[key] = std::move(value);
    return ChatError(j);
  };
  EXPECT_EQ(ParseChatCompletionRequest(with_n(ok, 3).dump())->params.n, 3);
  for (int bad : {0, 129}) {
    absl::Status n = with("n", bad);
    EXPECT_EQ(n.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(n.message(), HasSubstr("'n' is " + std::to_string(bad))) << bad;
  }
  EXPECT_EQ(with("stop", {"a", "b", "c", "d", "e"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("stop", {""}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("temperature", 2.5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("temperature", "hot").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("top_p", 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("max_tokens", 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("top_logprobs", 2).code(), absl::StatusCode::kInvalidArgument);  // no logprobs
  EXPECT_EQ(with("top_logprobs", 0).code(), absl::StatusCode::kInvalidArgument);  // no logprobs
  EXPECT_EQ(with("logprobs", 3).code(), absl::StatusCode::kInvalidArgument);      // chat: a boolean
  json too_many = ok;
  too_many["logprobs"] = true;
  too_many["top_logprobs"] = 21;
  EXPECT_THAT(ChatError(too_many).message(),
              HasSubstr("'top_logprobs' is 21; it must be in [0, 20]"));
  EXPECT_EQ(with("tools", {{{"type", "function"}}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("functions", {{{"name", "f g"}}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("stream_options", {{"include_usage", true}}).code(),
            absl::StatusCode::kInvalidArgument);  // without stream
  EXPECT_TRUE(with("tools", json::array()).ok());
  EXPECT_TRUE(with("logit_bias", json::object()).ok());
  EXPECT_THAT(with("logit_bias", {{"abc", 1}}).message(),
              HasSubstr("'logit_bias' key \"abc\" is not a token id"));
  EXPECT_THAT(with("logit_bias", {{"-3", 1}}).message(), HasSubstr("is not a token id"));
  EXPECT_THAT(with("logit_bias", {{"5", 101}}).message(),
              HasSubstr("'logit_bias' of token 5 must be a number in [-100, 100]"));
  EXPECT_THAT(with("logit_bias", {{"5", "up"}}).message(), HasSubstr("must be a number"));
  EXPECT_THAT(with("logit_bias", json::array({1})).message(), HasSubstr("must be an object"));
  EXPECT_EQ(with("min_p", 1.5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("presence_penalty", -2.5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with("top_k", 2.5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(with("response_format", {{"type", "text"}}).ok());
  EXPECT_EQ(ChatError(json{{"messages", json::array()}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ChatError(json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}})
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseChatCompletionRequest("[1,2]").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseChatCompletionRequest("{").status().code(), absl::StatusCode::kInvalidArgument);
}

// Fields for what kvfold does not produce (audio, predicted outputs, web search, stored
// conversations and prompts, background runs) are refused with a 400 naming them, never
// ignored; the values that ask for nothing are accepted.
TEST(OpenAiProtocolTest, RefusesFeaturesItDoesNotHaveInsteadOfIgnoringThem) {
  const json chat = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};
  auto chat_with = [&](const char* key, json value) {
    json j = chat;
    j[key] = std::move(value);
    return ParseChatCompletionRequest(j.dump()).status();
  };
  for (const char* key : {"audio", "prediction", "web_search_options"}) {
    const absl::Status s = chat_with(key, json::object());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("'", key, "' is not supported by kvfold")));
    EXPECT_EQ(ParamOf(s), key);
    EXPECT_TRUE(chat_with(key, nullptr).ok()) << key;
  }
  EXPECT_TRUE(chat_with("modalities", {"text"}).ok());
  EXPECT_TRUE(chat_with("modalities", json::array()).ok());
  EXPECT_THAT(chat_with("modalities", {"text", "audio"}).message(),
              HasSubstr("modality 'audio' is not supported by kvfold"));
  EXPECT_THAT(chat_with("modalities", "text").message(), HasSubstr("must be an array"));

  const json response = {{"input", "x"}};
  auto response_with = [&](const char* key, json value) {
    json j = response;
    j[key] = std::move(value);
    return ParseResponsesRequest(j.dump()).status();
  };
  for (const json& conversation : {json("conv_1"), json{{"id", "conv_1"}}}) {
    const absl::Status s = response_with("conversation", conversation);
    EXPECT_EQ(ParamOf(s), "conversation");
    EXPECT_THAT(s.message(), HasSubstr("continue a response with 'previous_response_id'"));
  }
  EXPECT_EQ(ParamOf(response_with("background", true)), "background");
  EXPECT_EQ(ParamOf(response_with("background", "yes")), "background");
  EXPECT_TRUE(response_with("background", false).ok());
  EXPECT_EQ(ParamOf(response_with("prompt", {{"id", "pmpt_1"}})), "prompt");
  EXPECT_TRUE(response_with("truncation", "auto").ok());
  EXPECT_TRUE(response_with("truncation", "disabled").ok());
  EXPECT_THAT(response_with("truncation", "middle").message(),
              HasSubstr("'truncation' must be \"auto\" or \"disabled\""));
  EXPECT_TRUE(response_with("conversation", nullptr).ok());
}

// An input token count takes the fields of a create that decide its input, checked as a
// create checks them, and nothing else.
TEST(OpenAiProtocolTest, InputTokenCountsTakeTheFieldsThatDecideTheInput) {
  auto r = ParseInputTokensRequest(
      R"({"model": "m", "input": [{"role": "user", "content": "hi"}], "instructions": "be",
          "previous_response_id": "resp_2_s", "truncation": "auto", "reasoning": null,
          "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
          "tool_choice": "auto", "parallel_tool_calls": true,
          "text": {"format": {"type": "text"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->input.size(), 1u);
  EXPECT_EQ(r->input[0].content, "hi");
  EXPECT_EQ(r->instructions, "be");
  EXPECT_EQ(r->previous_response_id, "resp_2_s");
  EXPECT_EQ(r->tools.Shown().size(), 1u);
  for (const char* key : {"stream", "max_output_tokens", "store", "temperature", "metadata"}) {
    const absl::Status s = ParseInputTokensRequest(json{{"input", "x"}, {key, 1}}.dump()).status();
    EXPECT_EQ(ParamOf(s), key);
    EXPECT_THAT(s.message(), HasSubstr("is not a field of an input token count")) << key;
  }
  EXPECT_EQ(ParamOf(ParseInputTokensRequest(R"({"input": 3})").status()), "input");
  EXPECT_EQ(ParamOf(ParseInputTokensRequest(R"({"input": "x", "conversation": "c"})").status()),
            "conversation");
  EXPECT_EQ(ParseInputTokensRequest("[]").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(json::parse(InputTokensJson(17)),
            (json{{"object", "response.input_tokens"}, {"input_tokens", 17}}));
}

TEST(OpenAiProtocolTest, CompletionsAndResponsesRequests) {
  auto c = ParseCompletionRequest(R"({"prompt": ["Once"], "max_tokens": 3, "logprobs": 2})");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->prompts.size(), 1u);
  EXPECT_EQ(c->prompts[0].text, "Once");
  EXPECT_TRUE(c->params.logprobs);
  EXPECT_EQ(c->params.top_logprobs, 2);
  // Token-id prompts: a list, or a batch of one list; fed without BOS.
  for (const char* body : {R"({"prompt": [1, 403, 407]})", R"({"prompt": [[1, 403, 407]]})"}) {
    auto ids = ParseCompletionRequest(body);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(ids->prompts.size(), 1u);
    EXPECT_EQ(ids->prompts[0].ids, (std::vector<int32_t>{1, 403, 407}));
    EXPECT_TRUE(ids->prompts[0].text.empty());
  }
  EXPECT_TRUE(ParseCompletionRequest(R"({"prompt": "Once"})")->prompts[0].ids.empty());
  // A batch: strings and token lists, in order, n choices each.
  auto batch = ParseCompletionRequest(R"({"prompt": ["a", [5, 6], ""], "n": 2})");
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->prompts.size(), 3u);
  EXPECT_EQ(batch->prompts[0].text, "a");
  EXPECT_EQ(batch->prompts[1].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(batch->prompts[2].text.empty() && batch->prompts[2].ids.empty());
  EXPECT_EQ(batch->params.n, 2);
  json many = {{"prompt", std::vector<std::string>(65, "x")}, {"n", 2}};
  for (const auto& [body, message] : std::vector<std::pair<std::string, std::string>>{
           {many.dump(), "65 prompts x n = 2 is 130 choices (at most 128 per request)"},
           {R"({"prompt": [[1, 2], [-3]]})", "token ids must be integers >= 0"},
           {R"({"prompt": ["a", 5]})", "must be a string, an array of token ids"},
           {R"({"prompt": ["a", []]})", "must be a string, an array of token ids"},
           {R"({"prompt": [1, -2]})", "token ids must be integers >= 0"},
           {R"({"prompt": [1, 2.5]})", "token ids must be integers >= 0"},
           {R"({"prompt": [1, "a"]})", "token ids must be integers >= 0"},
           {R"({"prompt": [1, 4294967296]})", "token ids must be integers >= 0"},
           {R"({"prompt": []})", "must be a string, an array of token ids"},
           {R"({"prompt": [[]]})", "must be a string, an array of token ids"},
           {R"({"prompt": 5})", "must be a string, an array of token ids"},
           {R"({"max_tokens": 5})", "must be a string, an array of token ids"}}) {
    EXPECT_THAT(std::string(ParseCompletionRequest(body).status().message()), HasSubstr(message))
        << body;
  }
  EXPECT_EQ(json::parse(ErrorJson(ParseCompletionRequest(many.dump()).status()))["error"]["param"],
            "n");
  // A response has one output.
  EXPECT_EQ(ParseResponsesRequest(R"({"input": "hi", "n": 1})")->params.n, 1);
  EXPECT_THAT(std::string(ParseResponsesRequest(R"({"input": "hi", "n": 2})").status().message()),
              HasSubstr("a response has one output"));
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt": "a", "logprobs": 6})").ok());
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt": "a", "logprobs": true})").ok());
  auto included = ParseResponsesRequest(
      R"({"input": "hi", "include": ["message.output_text.logprobs"], "top_logprobs": 4})");
  ASSERT_TRUE(included.ok()) << included.status();
  EXPECT_TRUE(included->params.logprobs);
  EXPECT_EQ(included->params.top_logprobs, 4);
  auto not_included = ParseResponsesRequest(R"({"input": "hi", "include": []})");
  ASSERT_TRUE(not_included.ok());
  EXPECT_FALSE(not_included->params.logprobs);
  auto r = ParseResponsesRequest(
      R"({"input": "hi", "instructions": "sys", "previous_response_id": "resp_3_s",
          "max_output_tokens": 5})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->input.size(), 1u);
  EXPECT_EQ(r->input[0].role, "user");
  EXPECT_EQ(r->params.max_tokens, 5);
  auto list = ParseResponsesRequest(
      R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}]}]})");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->input[0].content, "a");
  EXPECT_TRUE(ParseResponsesRequest(R"({"input": "x", "stream": true})")->stream);
  EXPECT_FALSE(ParseResponsesRequest(R"({"input": "x"})")->stream);
}

TEST(OpenAiProtocolTest, ResponseIdsNameSessionVersions) {
  const std::string id = ResponseId("sess_with_underscores", 12);
  EXPECT_EQ(id, "resp_12_sess_with_underscores");
  auto parsed = ParseResponseId(id);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->first, "sess_with_underscores");
  EXPECT_EQ(parsed->second, 12u);
  for (const char* bad : {"resp_", "resp_x_s", "resp_0_s", "resp_5_", "chatcmpl-1", "resp__s"}) {
    EXPECT_EQ(ParseResponseId(bad).status().code(), absl::StatusCode::kNotFound) << bad;
  }
}

// `max_tokens: 0` is OpenAI's legacy scoring request: only with echo (prompt only).
TEST(OpenAiProtocolTest, MaxTokensZeroScoresAnEchoedPromptOnly) {
  auto scoring = ParseCompletionRequest(
      R"({"prompt": [1, 403], "max_tokens": 0, "echo": true, "logprobs": 1})");
  ASSERT_TRUE(scoring.ok()) << scoring.status();
  EXPECT_TRUE(scoring->prompt_only);
  EXPECT_FALSE(scoring->params.max_tokens.has_value());
  EXPECT_EQ(scoring->params.top_logprobs, 1);
  auto generating = ParseCompletionRequest(R"({"prompt": "a", "max_tokens": 2, "echo": true})");
  ASSERT_TRUE(generating.ok());
  EXPECT_FALSE(generating->prompt_only);
  for (const char* body :
       {R"({"prompt": "a", "max_tokens": 0})", R"({"prompt": "a", "max_tokens": 0, "echo": false})",
        R"({"prompt": "a", "max_tokens": -1, "echo": true})"}) {
    auto r = ParseCompletionRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(json::parse(ErrorJson(r.status()))["error"]["param"], "max_tokens") << body;
  }
}

// An echoed prompt's first token (nothing before it) has null log-probabilities in the
// legacy layout; the others their values.
TEST(OpenAiProtocolTest, UnscoredPromptTokenIsNullInTheLegacyLayout) {
  ChatAnswer a;
  a.text = "Once";
  TokenLogprob first;
  first.token = "<s>";
  first.scored = false;
  TokenLogprob second{.token = "Once", .logprob = -1.5f, .top = {{"Once", -1.5f}}};
  a.logprobs = {first, second};
  const json legacy = json::parse(CompletionJson({a}, a.usage))["choices"][0]["logprobs"];
  EXPECT_EQ(legacy["tokens"], json({"<s>", "Once"}));
  EXPECT_TRUE(legacy["token_logprobs"][0].is_null());
  EXPECT_TRUE(legacy["top_logprobs"][0].is_null());
  EXPECT_EQ(legacy["token_logprobs"][1], -1.5);
  EXPECT_EQ(legacy["top_logprobs"][1]["Once"], -1.5);
}

TEST(OpenAiProtocolTest, AnswersAndErrors) {
  ChatAnswer a;
  a.id = "chatcmpl-1";
  a.model = "m";
  a.created = 5;
  a.text = "Hello";
  a.finish_reason = "stop";
  a.usage.prompt_tokens = 3;
  a.usage.completion_tokens = 2;
  a.usage.tokens_folded = 1;
  a.usage.version = 9;
  a.usage.session_id = "s";
  const json chat = json::parse(ChatCompletionJson({a}, a.usage));
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(chat["choices"][0]["index"], 0);
  EXPECT_EQ(chat["usage"]["total_tokens"], 5);
  EXPECT_EQ(chat["usage"]["kvfold"]["tokens_folded"], 1);
  EXPECT_EQ(chat["usage"]["kvfold"]["version"], 9);
  // Several choices: each under its index, in the order given; usage as given.
  ChatAnswer b = a;
  b.index = 1;
  b.text = "Hi";
  TurnUsage both = a.usage;
  both.completion_tokens = 3;
  const json two = json::parse(CompletionJson({a, b}, both));
  ASSERT_EQ(two["choices"].size(), 2u);
  EXPECT_EQ(two["choices"][1]["index"], 1);
  EXPECT_EQ(two["choices"][1]["text"], "Hi");
  EXPECT_EQ(two["usage"]["completion_tokens"], 3);
  EXPECT_EQ(json::parse(CompletionChunkEvent(b, "x", "", {}).substr(6))["choices"][0]["index"], 1);
  const std::string event = ChatChunkEvent(a, "He", true, "", {});
  ASSERT_TRUE(event.starts_with("data: ") && event.ends_with("\n\n"));
  const json chunk = json::parse(event.substr(6));
  EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunk["choices"][0]["index"], 0);
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  a.id = ResponseId("s", 9);
  const json response = json::parse(ResponseJson(a, R"({"previous_response_id": "resp_8_s"})"));
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(response["previous_response_id"], "resp_8_s");
  EXPECT_EQ(response["usage"]["input_tokens"], 3);

  // A streamed response: typed events, numbered in the order written.
  int sequence = 0;
  std::vector<std::pair<std::string, json>> events;
  auto collect = [&events](const std::string& text) {
    size_t pos = 0;
    while (pos < text.size()) {
      ASSERT_EQ(text.compare(pos, 7, "event: "), 0) << text;
      const size_t nl = text.find('\n', pos);
      const size_t end = text.find("\n\n", nl);
      ASSERT_EQ(text.compare(nl + 1, 6, "data: "), 0) << text;
      events.emplace_back(text.substr(pos + 7, nl - pos - 7),
                          json::parse(text.substr(nl + 7, end - nl - 7)));
      pos = end + 2;
    }
  };
  collect(ResponseStreamStart(a, R"({"previous_response_id": "resp_8_s"})", &sequence));
  collect(ResponseTextDeltaEvent(a, "Hel", {}, &sequence));
  collect(ResponseTextDeltaEvent(a, "lo", {}, &sequence));
  collect(ResponseStreamEnd(a, R"({"previous_response_id": "resp_8_s"})", &sequence));
  const std::vector<std::string> types = {
      "response.created",           "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done",  "response.completed"};
  ASSERT_EQ(events.size(), types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    EXPECT_EQ(events[i].first, types[i]);
    EXPECT_EQ(events[i].second["type"], types[i]);
    EXPECT_EQ(events[i].second["sequence_number"], i);
  }
  EXPECT_EQ(sequence, 9);
  EXPECT_EQ(events[0].second["response"]["status"], "in_progress");
  EXPECT_TRUE(events[0].second["response"]["output"].empty());
  EXPECT_EQ(events[3].second["item_id"], "msg_9_s");
  EXPECT_EQ(events[5].second["text"], "Hello");
  EXPECT_EQ(events[8].second["response"], response);
  a.finish_reason = "length";
  EXPECT_THAT(ResponseStreamEnd(a, "", &sequence), HasSubstr("event: response.incomplete\n"));
  const std::string failed =
      ResponseFailedEvent(a, "", absl::AbortedError("the session moved on"), &sequence);
  ASSERT_TRUE(failed.starts_with("event: response.failed\ndata: ")) << failed;
  const json f = json::parse(failed.substr(failed.find("data: ") + 6));
  EXPECT_EQ(f["response"]["status"], "failed");
  EXPECT_EQ(f["response"]["error"]["code"], "ABORTED");
  EXPECT_EQ(f["response"]["error"]["message"], "the session moved on");
  EXPECT_EQ(f["sequence_number"], 13);

  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kAborted), 409);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  const json error = json::parse(ErrorJson(absl::ResourceExhaustedError("pool at 97%")));
  EXPECT_EQ(error["error"]["message"], "pool at 97%");
  EXPECT_EQ(error["error"]["type"], "rate_limit_error");
}

// OpenAI's error.param names the request field a 400 is about (null for the body as a
// whole and for errors that are not about one field).
TEST(OpenAiProtocolTest, ErrorsNameTheirParam) {
  auto param_of = ParamOf;
  const struct {
    const char* body;
    const char* param;  // nullptr: JSON null
  } chat_cases[] = {
      {R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": "7"})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 0})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 1.5})",
       "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "a"}], "temperature": 3})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "a"}], "top_p": 0})", "top_p"},
      {R"({"messages": [{"role": "user", "content": "a"}], "n": 0})", "n"},
      {R"({"messages": [{"role": "user", "content": "a"}], "stop": ["a", 1]})", "stop"},
      {R"({"messages": [{"role": "user", "content": "a"}], "tools": [{}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "a"}], "stream": true,
           "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {R"({"messages": [{"role": "user", "content": "a"}], "model": 5})", "model"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"content": "b"}]})", "messages[1]"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content"},
      {R"({})", "messages"},
      {R"({"messages": )", nullptr},
      {R"([1, 2])", nullptr},
  };
  for (const auto& c : chat_cases) {
    auto r = ParseChatCompletionRequest(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    if (c.param == nullptr) {
      EXPECT_TRUE(param_of(r.status()).is_null()) << c.body;
    } else {
      EXPECT_EQ(param_of(r.status()), c.param) << c.body << ": " << r.status();
    }
  }
  EXPECT_EQ(param_of(ParseCompletionRequest(R"({"prompt": 5})").status()), "prompt");
  EXPECT_EQ(param_of(ParseCompletionRequest(R"({"prompt": "a", "logprobs": true})").status()),
            "logprobs");
  EXPECT_EQ(param_of(ParseResponsesRequest(R"({"input": "x", "stream": 1})").status()), "stream");
  EXPECT_EQ(param_of(ParseResponsesRequest(R"({"input": 1})").status()), "input");
  EXPECT_EQ(param_of(ParseResponsesRequest(R"({"input": "x", "include": "a"})").status()),
            "include");
  EXPECT_EQ(param_of(WithParam(absl::NotFoundError("gone"), "previous_response_id")),
            "previous_response_id");
  EXPECT_TRUE(WithParam(absl::OkStatus(), "model").ok());
  // Errors from elsewhere carry no field.
  EXPECT_TRUE(param_of(absl::InvalidArgumentError("prompt too long")).is_null());
  EXPECT_TRUE(param_of(absl::NotFoundError("no route")).is_null());
}

// Seeded random bodies for the three parsers: valid requests with fields replaced by values
// of every JSON type and edge (huge, negative, NaN-free doubles, nested, empty), some cut
// short or with bytes flipped. Each parse either succeeds or is InvalidArgument with a
// message, whose ErrorJson is valid JSON with a string or null param: never a crash, an
// exception or another code.
TEST(OpenAiProtocolTest, RandomBodiesGetOkOrAPreciseError) {
  json values = json::parse(R"([
      null, true, false, 0, -1, 1, 2147483648, 9223372036854775807, -9223372036854775808,
      1e308, -1e308, 3.5, -0.0, "", "user", "system", [], [1, 2], {}, {"a": 1}, [{}], [[]],
      [{"role": "user"}], [{"role": "user", "content": [{"type": "text", "text": "a"}]}],
      [{"role": 5, "content": "x"}], {"include_usage": "yes"},
      ["message.output_text.logprobs"], {"13": -100}, {"13": 1e9}, {"x": 1},
      [{"role": "user", "content": [{"type": 7}]}], [{"type": 3}], "required", "auto",
      {"type": "function", "function": {"name": "f"}}, {"type": 1, "name": "f"},
      {"type": "function", "name": "g"},
      [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
      [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": 3}],
      [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
      [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
       {"role": "tool", "content": "x"}],
      [{"role": "assistant", "tool_calls": [{"function": {"name": 1, "arguments": 2}}]}],
      [{"type": "function_call", "name": "f", "arguments": "{"},
       {"type": "function_call_output", "output": 3}],
      [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
       {"type": "function_call_output", "call_id": "c", "output": "ok"}]])");
  values.push_back(std::string(5000, 'x'));
  const json keys = json::parse(R"([
      "model", "messages", "prompt", "input", "max_tokens", "max_completion_tokens",
      "max_output_tokens", "temperature", "top_p", "seed", "stream", "stream_options",
      "logprobs", "top_logprobs", "n", "stop", "previous_response_id", "instructions",
      "include", "tools", "tool_choice", "parallel_tool_calls", "response_format", "text",
      "logit_bias", "echo", "suffix", "best_of",
      "kvfold_session", "continue_final_message", "presence_penalty", "frequency_penalty",
      "repetition_penalty", "top_k", "min_p"])");
  const json bases[3] = {
      {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}},
      {{"model", "m"}, {"prompt", "Once"}, {"max_tokens", 4}},
      {{"model", "m"}, {"input", "Once"}, {"max_output_tokens", 4}}};
  std::mt19937 rng(20261205);
  auto pick = [&rng](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int ok = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    const int api = static_cast<int>(pick(3));
    json body = bases[api];
    for (size_t edits = 1 + pick(4); edits > 0; --edits) {
      const std::string key = keys[pick(keys.size())].get<std::string>();
      if (pick(5) == 0) {
        body.erase(key);
      } else {
        body[key] = values[pick(values.size())];
      }
    }
    std::string text = body.dump();
    if (pick(10) == 0) text.resize(pick(text.size() + 1));
    if (pick(20) == 0 && !text.empty()) text[pick(text.size())] = static_cast<char>(pick(256));
    absl::Status status;
    switch (api) {
      case 0:
        status = ParseChatCompletionRequest(text).status();
        break;
      case 1:
        status = ParseCompletionRequest(text).status();
        break;
      default:
        status = ParseResponsesRequest(text).status();
        break;
    }
    if (status.ok()) {
      ++ok;
      continue;
    }
    ++refused;
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text << ": " << status;
    ASSERT_FALSE(status.message().empty()) << text;
    const json error = json::parse(ErrorJson(status), nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(error.is_discarded()) << text;
    ASSERT_TRUE(error["error"]["param"].is_null() || error["error"]["param"].is_string()) << text;
    ASSERT_EQ(error["error"]["message"], std::string(status.message()));
  }
  // Both outcomes occur, so the loop exercised the parsers' success paths and their checks.
  EXPECT_GT(ok, 100);
  EXPECT_GT(refused, 1000);
}

TEST(OpenAiProtocolTest, ResponseFormatsOfEveryEndpoint) {
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  chat["response_format"] = {{"type", "json_object"}};
  auto c = ParseChatCompletionRequest(chat.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->params.format, OutputFormat::kJsonObject);
  chat["response_format"] = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "n"}, {"schema", schema}, {"strict", true}}}};
  c = ParseChatCompletionRequest(chat.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->params.format, OutputFormat::kJsonSchema);
  EXPECT_EQ(json::parse(c->params.json_schema), schema);
  chat["response_format"] = {{"type", "text"}};
  EXPECT_EQ(ParseChatCompletionRequest(chat.dump())->params.format, OutputFormat::kText);

  // The schema keeps the body's key order (properties are written in it).
  auto ordered = ParseChatCompletionRequest(
      R"({"messages":[{"role":"user","content":"Hi"}],"response_format":{"type":"json_schema",)"
      R"("json_schema":{"name":"n","schema":{"type":"object","properties":{"z":{},"a":{}}}}}})");
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  EXPECT_EQ(ordered->params.json_schema, R"({"type":"object","properties":{"z":{},"a":{}}})");

  json completion = {{"prompt", "Once"}, {"response_format", {{"type", "json_object"}}}};
  EXPECT_EQ(ParseCompletionRequest(completion.dump())->params.format, OutputFormat::kJsonObject);

  json responses = {
      {"input", "Once"},
      {"text", {{"format", {{"type", "json_schema"}, {"name", "n"}, {"schema", schema}}}}}};
  auto r = ParseResponsesRequest(responses.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.format, OutputFormat::kJsonSchema);
  EXPECT_EQ(json::parse(r->params.json_schema), schema);

  // Malformed formats: a 400 naming the parameter.
  for (const json& bad : {json("json"), json{{"type", "yaml"}}, json{{"type", "json_schema"}},
                          json{{"type", "json_schema"}, {"json_schema", {{"name", "n"}}}},
                          json{{"type", "json_schema"}, {"json_schema", {{"schema", "x"}}}}}) {
    SCOPED_TRACE(bad.dump());
    chat["response_format"] = bad;
    auto parsed = ParseChatCompletionRequest(chat.dump());
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("response_format"));
  }
  responses["text"] = {{"format", {{"type", "json_schema"}}}};
  EXPECT_THAT(std::string(ParseResponsesRequest(responses.dump()).status().message()),
              HasSubstr("text.format.schema"));
}

// vLLM's spellings: guided_json (a schema or its text), guided_choice, structured_outputs.
TEST(OpenAiProtocolTest, VllmGuidedDecodingParams) {
  const json base = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  json body = base;
  body["guided_json"] = {{"type", "object"}};
  auto r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.format, OutputFormat::kJsonSchema);
  EXPECT_EQ(r->params.json_schema, R"({"type":"object"})");
  body["guided_json"] = R"({"type": "integer"})";
  EXPECT_EQ(ParseChatCompletionRequest(body.dump())->params.json_schema, R"({"type": "integer"})");
  body = base;
  body["guided_choice"] = {"yes", "no"};
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.format, OutputFormat::kChoice);
  EXPECT_EQ(r->params.choices, (std::vector<std::string>{"yes", "no"}));
  body = base;
  body["structured_outputs"] = {{"choice", {"a"}}};
  EXPECT_EQ(ParseChatCompletionRequest(body.dump())->params.format, OutputFormat::kChoice);
  body["structured_outputs"] = {{"json", {{"type", "array"}}}};
  EXPECT_EQ(ParseCompletionRequest(
                json{{"prompt", "x"}, {"structured_outputs", body["structured_outputs"]}}.dump())
                ->params.format,
            OutputFormat::kJsonSchema);

  const std::vector<std::pair<json, std::string>> bad = {
      {{{"guided_json", {{"type", "object"}}}, {"guided_choice", {"a"}}}, "guided_choice"},
      {{{"response_format", {{"type", "json_object"}}}, {"guided_json", {{"type", "object"}}}},
       "guided_json"},
      {{{"guided_json", "not json"}}, "guided_json"},
      {{{"guided_json", 3}}, "guided_json"},
      {{{"guided_choice", json::array()}}, "guided_choice"},
      {{{"guided_choice", {1, 2}}}, "guided_choice"},
      {{{"guided_regex", "a+"}}, "guided_regex"},
      {{{"structured_outputs", {{"regex", "a+"}}}}, "structured_outputs"},
      {{{"structured_outputs", {{"json", {{"type", "object"}}}, {"choice", {"a"}}}}},
       "structured_outputs"},
  };
  for (const auto& [fields, param] : bad) {
    SCOPED_TRACE(fields.dump());
    body = base;
    body.update(fields);
    auto parsed = ParseChatCompletionRequest(body.dump());
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(param));
  }
}

// Python's json.dumps(x, ensure_ascii=False) of the same value, as printed by
// /usr/bin/python3 (escapes, number forms, separators, key order).
TEST(ToolCallsTest, PythonJsonTextWritesWhatPythonWrites) {
  const std::string source =
      R"({"b": [1, 2.5, -0.0, 1e-05, 1e+22, 0.0001, 123456789012345678, true, null], )"
      R"("a": {"s": "q\"\\ \n\t\r\b\f\u0001\u007f é 😀 </", "e": {}, "l": []}})";
  EXPECT_EQ(
      PythonJsonText(nlohmann::ordered_json::parse(source)),
      "{\"b\": [1, 2.5, -0.0, 1e-05, 1e+22, 0.0001, 123456789012345678, true, null], "
      "\"a\": {\"s\": \"q\\\"\\\\ \\n\\t\\r\\b\\f\\u0001\x7f é 😀 </\", \"e\": {}, \"l\": []}}");
}

TEST(ToolCallsTest, PythonJsonTextIndentedWritesWhatPythonWrites) {
  const auto value =
      nlohmann::ordered_json::parse(R"({"a": {"b": [1, {"c": "d"}], "e": {}, "f": []}, "g": "h"})");
  // json.dumps(value, indent=4, ensure_ascii=False)
  EXPECT_EQ(PythonJsonText(value, 4),
            "{\n    \"a\": {\n        \"b\": [\n            1,\n            {\n                "
            "\"c\": \"d\"\n            }\n        ],\n        \"e\": {},\n        \"f\": []\n    "
            "},\n    \"g\": \"h\"\n}");
  EXPECT_EQ(PythonJsonOf("[1,2]", -1, "x").value(), "[1, 2]");
  EXPECT_EQ(PythonJsonOf("{", -1, "the tool").status().message(), "the tool is not JSON text");
}

json Tool(const std::string& name, json parameters = nullptr) {
  json f = {{"name", name}};
  if (!parameters.is_null()) f["parameters"] = std::move(parameters);
  return {{"type", "function"}, {"function", f}};
}

TEST(ToolCallsTest, ParsesToolsAndChoices) {
  const json city = {{"type", "object"},
                     {"properties", {{"city", {{"enum", {"Paris", "Oslo"}}}}}},
                     {"required", {"city"}}};
  json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
               {"tools", {Tool("weather", city), Tool("time")}}};
  auto r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tools.choice, ToolChoice::kAuto);
  ASSERT_EQ(r->tools.functions.size(), 2u);
  // As the body wrote it (nlohmann::json writes keys sorted), in Python's form.
  EXPECT_EQ(r->tools.functions[1].rendered,
            R"({"function": {"name": "time"}, "type": "function"})");
  EXPECT_EQ(r->tools.functions[1].parameters, R"({"type":"object"})");
  EXPECT_EQ(r->params.format, OutputFormat::kText);  // auto: free text, read afterwards

  body["tool_choice"] = "required";
  body["parallel_tool_calls"] = false;
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.format, OutputFormat::kJsonSchema);
  const json schema = json::parse(r->params.json_schema);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);
  ASSERT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["const"], "weather");
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["arguments"], city);

  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "weather"}}}};
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tools.choice, ToolChoice::kFunction);
  EXPECT_EQ(json::parse(r->params.json_schema), city);

  body["tool_choice"] = "none";
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->tools.active());

  // Errors name their field.
  auto error = [&](json b) { return ParseChatCompletionRequest(b.dump()).status(); };
  auto with = [&](const char* key, json value) {
    json b = body;
    b[key] = std::move(value);
    return error(b);
  };
  auto expect_bad = [](const absl::Status& s, const std::string& param, const std::string& text) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(ErrorJson(s), HasSubstr("\"param\":\"" + param + "\"")) << s;
    EXPECT_THAT(s.message(), HasSubstr(text)) << s;
  };
  expect_bad(with("tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}),
             "tool_choice", "'nope', which is not among 'tools'");
  expect_bad(with("tool_choice", "sometimes"), "tool_choice", "must be \"none\"");
  expect_bad(with("tools", {Tool("a b")}), "tools", "tools[0].function.name");
  expect_bad(with("tools", {Tool("f"), Tool("f")}), "tools", "offered twice");
  expect_bad(with("tools", {{{"type", "retrieval"}}}), "tools", "tools[0] must be");
  expect_bad(with("tools", {Tool("f", "object")}), "tools", "parameters must be");
  expect_bad(with("tools", json::array_t(129, Tool("f"))), "tools", "at most 128");
  expect_bad(with("parallel_tool_calls", "yes"), "parallel_tool_calls", "must be a boolean");
  json no_tools = body;
  no_tools.erase("tools");
  no_tools["tool_choice"] = "required";
  expect_bad(error(no_tools), "tool_choice", "needs 'tools'");
  json both = body;
  both["tool_choice"] = "required";
  both["response_format"] = {{"type", "json_object"}};
  expect_bad(error(both), "tool_choice", "cannot be combined");
  // Tools stay chat's: completions and responses refuse them.
  EXPECT_EQ(
      ParseCompletionRequest(json{{"prompt", "x"}, {"tools", {Tool("f")}}}.dump()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// Whether the answer held for `r`'s tools takes `text` whole.
bool Holds(const ChatCompletionRequest& r, std::string_view text) {
  if (r.params.grammar == nullptr) return false;
  structured::JsonMatcher m(r.params.grammar);
  return m.Advance(text) && m.IsComplete();
}

TEST(ToolCallsTest, ReferencesAndLenientToolsInTheHeldAnswer) {
  // Tools whose parameters refer into themselves ($defs of the same name, the root), held
  // together under tool_choice required: each reference keeps its tool's target.
  const json item_n =
      json::parse(R"j({"type":"object","properties":{"item":{"$ref":"#/$defs/Item"}},
      "required":["item"],"additionalProperties":false,
      "$defs":{"Item":{"type":"object","properties":{"n":{"type":"integer"}},
               "required":["n"],"additionalProperties":false}}})j");
  const json item_x = json::parse(R"j({"type":"object","properties":{"item":{"$ref":"#/$defs/Item"},
      "note":{"const":{"$ref":"#/$defs/Item"}}},
      "required":["item"],"additionalProperties":false,"$defs":{"Item":{"enum":["x"]}}})j");
  const json tree = json::parse(R"j({"type":"object","properties":{
      "child":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["child"],
      "additionalProperties":false})j");
  json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
               {"tools", {Tool("a", item_n), Tool("b", item_x), Tool("c", tree)}},
               {"tool_choice", "required"}};
  auto r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  const json schema = json::parse(r->params.json_schema);
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["arguments"]["properties"]["item"]["$ref"],
            "#/items/anyOf/1/properties/arguments/$defs/Item");
  // A "$ref" member of a value is data, as written.
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["arguments"]["properties"]["note"]["const"],
            item_x["properties"]["note"]["const"]);
  EXPECT_TRUE(r->params.grammar->skipped().empty());
  EXPECT_TRUE(Holds(*r, R"([{"name":"a","arguments":{"item":{"n":1}}}])"));
  EXPECT_TRUE(Holds(*r, R"([{"name":"b","arguments":{"item":"x"}}])"));
  EXPECT_TRUE(Holds(*r, R"([{"name":"c","arguments":{"child":{"child":null}}}])"));
  EXPECT_FALSE(Holds(*r, R"([{"name":"a","arguments":{"item":"x"}}])"));
  EXPECT_FALSE(Holds(*r, R"([{"name":"b","arguments":{"item":{"n":1}}}])"));
  EXPECT_FALSE(Holds(*r, R"([{"name":"c","arguments":{"child":{"item":"x"}}}])"));
  body["tools"] = {Tool("c", tree)};  // one tool: the items are its call
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Holds(*r, R"([{"name":"c","arguments":{"child":{"child":{"child":null}}}}])"));
  EXPECT_FALSE(Holds(*r, R"([{"name":"c","arguments":{"child":{"child":1}}}])"));

  // `strict: false`: what the subset cannot hold is read past in that tool's parameters
  // only, and named with the tool; the rest is held.
  const json tags = json::parse(R"j({"type":"object","properties":{
      "ids":{"type":"array","items":{"type":"number","maximum":99},"uniqueItems":true}},
      "required":["ids"],"additionalProperties":false})j");
  json loose = Tool("tag", tags);
  loose["function"]["strict"] = false;
  body["tools"] = {Tool("a", item_n), loose};
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(
      r->params.grammar->skipped(),
      std::vector<std::string>{"uniqueItems at '/properties/ids' in tools[1].function.parameters"});
  EXPECT_TRUE(Holds(*r, R"([{"name":"tag","arguments":{"ids":[7,7]}}])"));
  EXPECT_FALSE(Holds(*r, R"([{"name":"tag","arguments":{"ids":[100]}}])"));
  EXPECT_FALSE(Holds(*r, R"([{"name":"a","arguments":{"ids":[]}}])"));
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "tag"}}}};
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(
      r->params.grammar->skipped(),
      std::vector<std::string>{"uniqueItems at '/properties/ids' in tools[1].function.parameters"});
  EXPECT_TRUE(Holds(*r, R"({"ids":[7,7]})"));
  // Strict (true or not given), or a lenient tool's parameters elsewhere strict, refuse it.
  for (const json& strict : {json(true), json()}) {
    json held = Tool("tag", tags);
    if (!strict.is_null()) held["function"]["strict"] = strict;
    body["tools"] = {Tool("a", item_n), held};
    const absl::Status s = ChatError(body);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("tools[1].function.parameters: schema at '/properties/ids/uniqueItems'"));
  }
  json loose_a = Tool("a", tags);
  loose_a["function"]["strict"] = false;
  body["tools"] = {loose_a, Tool("tag", tags)};
  body["tool_choice"] = "required";
  EXPECT_THAT(std::string(ChatError(body).message()), HasSubstr("tools[1].function.parameters"));
  // What is not a schema is refused however lenient.
  body["tools"] = {Tool("a", item_n), loose};
  body["tools"][1]["function"]["parameters"]["properties"]["ids"]["minItems"] = -1;
  EXPECT_THAT(std::string(ChatError(body).message()), HasSubstr("tools[1].function.parameters"));

  // The Responses API's tools carry `strict` beside the name.
  const json responses = {
      {"input", "x"},
      {"tools", {{{"type", "function"}, {"name", "tag"}, {"strict", false}, {"parameters", tags}}}},
      {"tool_choice", "required"}};
  auto rr = ParseResponsesRequest(responses.dump());
  ASSERT_TRUE(rr.ok()) << rr.status();
  ASSERT_NE(rr->params.grammar, nullptr);
  EXPECT_EQ(
      rr->params.grammar->skipped(),
      std::vector<std::string>{"uniqueItems at '/properties/ids' in tools[0].function.parameters"});
}

TEST(ToolCallsTest, ParsesToolMessagesAndCalls) {
  const json body = {
      {"messages",
       {{{"role", "user"}, {"content", "Time?"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "call_1"},
            {"type", "function"},
            {"function", {{"name", "time"}, {"arguments", R"({"zone":"CET","n":[1,2]})"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "12:00"}}}}};
  auto r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  ASSERT_EQ(r->messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r->messages[1].content, "");
  EXPECT_EQ(r->messages[1].tool_calls[0].name, "time");
  // The arguments as the chat template writes them (Python's json.dumps, order kept).
  EXPECT_EQ(r->messages[1].tool_calls[0].arguments, R"({"zone": "CET", "n": [1, 2]})");
  EXPECT_EQ(r->messages[2].role, "tool");
  EXPECT_EQ(r->messages[2].content, "12:00");
  // The ids travel with them (Mistral's template writes them).
  EXPECT_EQ(r->messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r->messages[2].tool_call_id, "call_1");
  json bad_id = body;
  bad_id["messages"][1]["tool_calls"][0]["id"] = 7;
  EXPECT_THAT(ParseChatCompletionRequest(bad_id.dump()).status().message(),
              HasSubstr("messages[1].tool_calls[0].id must be a string"));

  json bad = body;
  bad["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{not json";
  EXPECT_THAT(ParseChatCompletionRequest(bad.dump()).status().message(),
              HasSubstr("messages[1].tool_calls[0].function.arguments is not JSON text"));
  bad = body;
  bad["messages"][1]["tool_calls"][0]["function"].erase("name");
  EXPECT_EQ(ParseChatCompletionRequest(bad.dump()).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = body;
  bad["messages"][2]["tool_call_id"] = 7;
  EXPECT_THAT(ParseChatCompletionRequest(bad.dump()).status().message(),
              HasSubstr("tool_call_id must be a string"));
}

ToolSet Set(ToolChoice choice) {
  ToolSet set;
  set.functions = {{"weather", "", R"({"type":"object"})"}, {"time", "", R"({"type":"object"})"}};
  set.choice = choice;
  if (choice == ToolChoice::kFunction) set.forced = "time";
  return set;
}

TEST(ToolCallsTest, ReadsCallsFromTheModelsText) {
  const ToolSet autos = Set(ToolChoice::kAuto);
  ToolAnswer a = ReadToolAnswer(
      "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}\n</tool_call>\n<tool_call>{\"name\": \"time\"}</tool_call>\n",
      autos);
  EXPECT_EQ(a.content, "Let me look.\n");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "weather");
  EXPECT_EQ(a.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(a.calls[1].arguments, "{}");
  // The last block may end with the text.
  EXPECT_EQ(
      ReadToolAnswer("<tool_call>{\"name\": \"time\", \"arguments\": {}}", autos).calls.size(), 1u);
  // Anything that does not read whole is content, as written.
  for (const std::string text :
       {"no calls here", "<tool_call>{\"name\": \"weather\", \"arguments\": {\"ci",
        "<tool_call>{\"name\": \"unknown\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"time\", \"arguments\": 3}</tool_call>",
        "<tool_call>{\"name\": \"time\"}</tool_call> and then text"}) {
    ToolAnswer none = ReadToolAnswer(text, autos);
    EXPECT_TRUE(none.calls.empty()) << text;
    EXPECT_EQ(none.content, text);
  }
  // Llama 3.1's style: the whole answer is the call ("parameters"), or several with ";".
  ToolSet json_style = autos;
  json_style.style = ToolCallStyle::kJson;
  ToolAnswer bare =
      ReadToolAnswer(" {\"name\": \"time\", \"parameters\": {\"zone\": \"CET\"}}", json_style);
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(bare.calls[0].arguments, R"({"zone":"CET"})");
  EXPECT_EQ(bare.content, "");
  EXPECT_EQ(ReadToolAnswer("<|python_tag|>{\"name\": \"time\", \"parameters\": {}}; "
                           "{\"name\": \"weather\", \"parameters\": {}}",
                           json_style)
                .calls.size(),
            2u);
  for (const std::string text : {"It is noon.", "{\"name\": \"time\", \"parameters\": {} and",
                                 "Sure: {\"name\": \"time\", \"parameters\": {}}"}) {
    EXPECT_TRUE(ReadToolAnswer(text, json_style).calls.empty()) << text;
    EXPECT_EQ(ReadToolAnswer(text, json_style).content, text);
  }
  // Mistral v0.3's: a list of calls as the whole answer (its [TOOL_CALLS] token decodes to
  // nothing; its text, if shown, is skipped), the ids it may write ignored.
  ToolSet mistral = autos;
  mistral.style = ToolCallStyle::kMistral;
  for (
      const std::string text :
      {R"( [{"name": "time", "arguments": {"zone": "CET"}}, {"name": "weather", "arguments": {}}])",
       R"([TOOL_CALLS] [{"name": "time", "arguments": {"zone": "CET"}, "id": "a1b2c3d4e"},)"
       R"( {"name": "weather", "arguments": {}}])"}) {
    ToolAnswer list = ReadToolAnswer(text, mistral);
    ASSERT_EQ(list.calls.size(), 2u) << text;
    EXPECT_EQ(list.calls[0].arguments, R"({"zone":"CET"})");
    EXPECT_EQ(list.calls[1].name, "weather");
    EXPECT_EQ(list.content, "");
  }
  for (const std::string text : {"[1] It is noon.", "[]", R"({"name": "time", "arguments": {}})",
                                 R"(Sure: [{"name": "time", "arguments": {}}])",
                                 R"([{"name": "time", "arguments": {}}, {"name": "moon"}])"}) {
    EXPECT_TRUE(ReadToolAnswer(text, mistral).calls.empty()) << text;
    EXPECT_EQ(ReadToolAnswer(text, mistral).content, text);
  }
  ToolAnswer required = ReadToolAnswer(
      R"([{"name": "time", "arguments": {"zone": "CET"}}, {"name": "weather", "arguments": {}}])",
      Set(ToolChoice::kRequired));
  ASSERT_EQ(required.calls.size(), 2u);
  EXPECT_EQ(required.calls[0].arguments, R"({"zone":"CET"})");
  EXPECT_EQ(required.content, "");
  EXPECT_TRUE(ReadToolAnswer("[]", Set(ToolChoice::kRequired)).calls.empty());
  ToolAnswer named = ReadToolAnswer(R"({"zone": "UTC"})", Set(ToolChoice::kFunction));
  ASSERT_EQ(named.calls.size(), 1u);
  EXPECT_EQ(named.calls[0].name, "time");
  EXPECT_TRUE(ReadToolAnswer(R"({"zone": )", Set(ToolChoice::kFunction)).calls.empty());
  EXPECT_TRUE(ReadToolAnswer("<tool_call>{\"name\": \"time\"}</tool_call>", Set(ToolChoice::kNone))
                  .calls.empty());
  const std::string id = NewToolCallId(ToolCallStyle::kTagged);
  EXPECT_EQ(id.size(), 29u);
  EXPECT_TRUE(id.starts_with("call_"));
  EXPECT_NE(id, NewToolCallId(ToolCallStyle::kJson));
  const std::string short_id = NewToolCallId(ToolCallStyle::kMistral);
  EXPECT_EQ(short_id.size(), 9u);  // Mistral's template refuses any other length
  EXPECT_EQ(short_id.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(ToolCallsTest, ResponsesTakeFunctionToolsAndCallItems) {
  const json body = {
      {"input",
       {{{"role", "user"}, {"content", "Time?"}},
        {{"type", "function_call"},
         {"call_id", "call_1"},
         {"name", "time"},
         {"arguments", R"({"zone":"CET"})"}},
        {{"type", "function_call"}, {"call_id", "call_2"}, {"name", "time"}, {"arguments", "{}"}},
        {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "12:00"}}}},
      {"tools", {{{"type", "function"}, {"name", "time"}, {"parameters", {{"type", "object"}}}}}},
      {"tool_choice", {{"type", "function"}, {"name", "time"}}}};
  auto r = ParseResponsesRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->input.size(), 3u);
  EXPECT_EQ(r->input[1].role, "assistant");
  ASSERT_EQ(r->input[1].tool_calls.size(), 2u);  // consecutive calls: one message
  EXPECT_EQ(r->input[1].tool_calls[0].arguments, R"({"zone": "CET"})");
  EXPECT_EQ(r->input[2].role, "tool");
  EXPECT_EQ(r->input[2].content, "12:00");
  EXPECT_EQ(r->input[1].tool_calls[1].id, "call_2");
  EXPECT_EQ(r->input[2].tool_call_id, "call_1");
  EXPECT_EQ(r->tools.choice, ToolChoice::kFunction);
  EXPECT_EQ(
      r->tools.functions[0].rendered,
      R"({"type": "function", "function": {"name": "time", "parameters": {"type": "object"}}})");
  EXPECT_EQ(r->params.format, OutputFormat::kJsonSchema);

  auto error = [&](json b) { return ParseResponsesRequest(b.dump()).status(); };
  json search = body;
  search["tools"] = {{{"type", "web_search"}}};
  EXPECT_THAT(error(search).message(), HasSubstr("only {\"type\": \"function\""));
  json bad_call = body;
  bad_call["input"][1]["arguments"] = "{x";
  EXPECT_THAT(ErrorJson(error(bad_call)), HasSubstr("\"param\":\"input[1].arguments\""));
  json bad_output = body;
  bad_output["input"][3].erase("output");
  EXPECT_THAT(error(bad_output).message(), HasSubstr("input[3]: a function_call_output needs"));
  json bad_message = body;
  bad_message["input"][0].erase("role");
  EXPECT_THAT(error(bad_message).message(), HasSubstr("input[0] must be an object"));

  // The answer: function_call items, no message item when there is no text.
  ChatAnswer a;
  a.id = "resp_1_s";
  a.finish_reason = "tool_calls";
  a.tool_calls = {{"call_abc", "time", R"({"zone":"UTC"})"}};
  json out = json::parse(ResponseJson(a, ""));
  ASSERT_EQ(out["output"].size(), 1u);
  EXPECT_EQ(out["output"][0]["type"], "function_call");
  EXPECT_EQ(out["output"][0]["call_id"], "call_abc");
  EXPECT_EQ(out["output"][0]["id"], "fc_abc");
  EXPECT_EQ(out["output"][0]["arguments"], R"({"zone":"UTC"})");
  EXPECT_EQ(out["status"], "completed");
  a.text = "Checking.";
  out = json::parse(ResponseJson(a, ""));
  ASSERT_EQ(out["output"].size(), 2u);
  EXPECT_EQ(out["output"][0]["type"], "message");

  // Streamed: after the message item, each call announced, its arguments, done.
  int sequence = 5;
  const std::string end = ResponseStreamEnd(a, "", &sequence);
  std::vector<json> events;
  for (size_t pos = 0; (pos = end.find("data: ", pos)) != std::string::npos;) {
    const size_t stop = end.find("\n\n", pos);
    events.push_back(json::parse(end.substr(pos + 6, stop - pos - 6)));
    pos = stop;
  }
  std::vector<std::string> types;
  for (const json& e : events) types.push_back(e["type"]);
  EXPECT_THAT(types,
              ::testing::ElementsAre("response.output_text.done", "response.content_part.done",
                                     "response.output_item.done", "response.output_item.added",
                                     "response.function_call_arguments.delta",
                                     "response.function_call_arguments.done",
                                     "response.output_item.done", "response.completed"));
  EXPECT_EQ(events[3]["output_index"], 1);
  EXPECT_EQ(events[3]["item"]["status"], "in_progress");
  EXPECT_EQ(events[5]["arguments"], R"({"zone":"UTC"})");
  EXPECT_EQ(events[6]["item"], out["output"][1]);
  EXPECT_EQ(events[7]["response"]["output"], out["output"]);
  EXPECT_EQ(events[7]["sequence_number"], 12);
}

TEST(ToolCallsTest, AnswersCarryToolCalls) {
  ChatAnswer a;
  a.id = "chatcmpl-1";
  a.finish_reason = "tool_calls";
  a.tool_calls = {{"call_1", "time", R"({"zone":"CET"})"}};
  const json body = json::parse(ChatCompletionJson({a}, TurnUsage{}));
  const json& message = body["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["tool_calls"][0],
            json({{"id", "call_1"},
                  {"type", "function"},
                  {"function", {{"name", "time"}, {"arguments", R"({"zone":"CET"})"}}}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  const std::string event = ChatToolCallsChunkEvent(a, a.tool_calls, true, {});
  ASSERT_TRUE(event.starts_with("data: "));
  const json chunk = json::parse(event.substr(6));
  const json& delta = chunk["choices"][0]["delta"];
  EXPECT_EQ(delta["role"], "assistant");
  EXPECT_EQ(delta["tool_calls"][0]["index"], 0);
  EXPECT_EQ(delta["tool_calls"][0]["function"]["name"], "time");
}

// OpenAI's deprecated `functions` / `function_call` and `function` messages, read as tools
// with one call at most; the answer's call goes out as `function_call`.
TEST(ToolCallsTest, DeprecatedFunctionsAreReadAsTools) {
  const json city = {{"type", "object"},
                     {"properties", {{"city", {{"enum", {"Paris", "Oslo"}}}}}},
                     {"required", {"city"}}};
  const json weather = {{"name", "weather"}, {"parameters", city}};
  json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
               {"functions", {weather, {{"name", "time"}}}}};
  auto r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->tools.legacy);
  EXPECT_FALSE(r->tools.parallel);
  EXPECT_EQ(r->tools.choice, ToolChoice::kAuto);
  ASSERT_EQ(r->tools.functions.size(), 2u);
  // Shown as the tool each stands for.
  EXPECT_EQ(r->tools.functions[1].rendered,
            R"({"type": "function", "function": {"name": "time"}})");
  EXPECT_EQ(r->params.format, OutputFormat::kText);
  body["function_call"] = {{"name", "weather"}};
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tools.choice, ToolChoice::kFunction);
  EXPECT_EQ(json::parse(r->params.json_schema), city);
  body["function_call"] = "none";
  r = ParseChatCompletionRequest(body.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->tools.active());

  const auto expect_bad = [](json b, const std::string& param, const std::string& text) {
    const absl::Status s = ChatError(b);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b;
    EXPECT_THAT(ErrorJson(s), HasSubstr("\"param\":\"" + param + "\"")) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(text)) << b;
  };
  const auto with = [&](const char* key, json value) {
    json b = body;
    b[key] = std::move(value);
    return b;
  };
  expect_bad(with("tools", {Tool("t")}), "functions", "cannot be combined with 'tools'");
  expect_bad(with("parallel_tool_calls", true), "functions",
             "cannot be combined with 'parallel_tool_calls'");
  expect_bad(with("function_call", "required"), "function_call", "must be \"none\", \"auto\"");
  expect_bad(with("function_call", {{"name", "nope"}}), "function_call",
             "'nope', which is not among 'functions'");
  expect_bad(with("functions", "weather"), "functions", "must be an array");
  expect_bad(with("functions", {weather, weather}), "functions", "offered twice");
  expect_bad(with("functions", {1}), "functions", "functions[0] must be");
  expect_bad(with("functions", {{{"name", "a b"}}}), "functions", "functions[0].name must be");
  json no_functions = body;
  no_functions.erase("functions");
  no_functions["function_call"] = "auto";
  expect_bad(no_functions, "function_call", "needs 'functions'");
  // A named function's parameters are held (leniently with strict: false), named as
  // functions[i].parameters.
  const json tags = json::parse(R"j({"name": "tag", "parameters": {"type": "object",
      "properties": {"tags": {"type": "array", "items": {"type": "number"}, "uniqueItems": true}}}})j");
  json named = with("functions", {tags});
  named["function_call"] = {{"name", "tag"}};
  expect_bad(named, "functions",
             "functions[0].parameters: schema at '/properties/tags/uniqueItems'");
  json formatted = with("function_call", {{"name", "weather"}});
  formatted["response_format"] = {{"type", "json_object"}};
  expect_bad(formatted, "function_call", "cannot be combined with 'response_format'");
  named["functions"][0]["strict"] = false;
  r = ParseChatCompletionRequest(named.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(
      r->params.grammar->skipped(),
      std::vector<std::string>{"uniqueItems at '/properties/tags' in functions[0].parameters"});
  // /tokenize counts the functions a chat turn shows.
  auto tokenize = ParseTokenizeRequest(
      json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"functions", {weather}}}.dump());
  ASSERT_TRUE(tokenize.ok()) << tokenize.status();
  ASSERT_EQ(tokenize->tools.size(), 1u);
  EXPECT_THAT(tokenize->tools[0], HasSubstr("\"name\": \"weather\""));
  // Completions refuse them still.
  EXPECT_EQ(ParseCompletionRequest(json{{"prompt", "x"}, {"functions", {weather}}}.dump())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  // Messages: an assistant's function_call and the function's result, linked by name.
  const json conversation = {
      {"messages",
       {{{"role", "user"}, {"content", "Weather and time?"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"function_call", {{"name", "weather"}, {"arguments", R"({"city":"Oslo"})"}}}},
        {{"role", "function"}, {"name", "weather"}, {"content", "snow"}},
        {{"role", "assistant"},
         {"content", "And the time:"},
         {"function_call", {{"name", "time"}, {"arguments", "{}"}}}},
        {{"role", "function"}, {"name", "time"}, {"content", "12:00"}}}},
      {"functions", {weather, {{"name", "time"}}}}};
  r = ParseChatCompletionRequest(conversation.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 5u);
  ASSERT_EQ(r->messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r->messages[1].tool_calls[0].name, "weather");
  EXPECT_EQ(r->messages[1].tool_calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(r->messages[1].tool_calls[0].id, "call_0001");
  EXPECT_EQ(r->messages[2].role, "tool");
  EXPECT_EQ(r->messages[2].tool_call_id, "call_0001");
  EXPECT_EQ(r->messages[3].content, "And the time:");
  EXPECT_EQ(r->messages[4].tool_call_id, "call_0002");
  const auto bad_message = [&](size_t i, json m, const std::string& param,
                               const std::string& text) {
    json b = conversation;
    b["messages"][i] = std::move(m);
    expect_bad(b, param, text);
  };
  // A result whose call is not in the request (a stored session's earlier turn): no id.
  json later = conversation;
  later["messages"] = {{{"role", "function"}, {"name", "time"}, {"content", "12:00"}}};
  r = ParseChatCompletionRequest(later.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[0].role, "tool");
  EXPECT_EQ(r->messages[0].tool_call_id, "");
  bad_message(2, {{"role", "function"}, {"content", "x"}}, "messages[2]",
              "needs the function's 'name'");
  bad_message(0, {{"role", "user"}, {"content", "x"}, {"function_call", {{"name", "time"}}}},
              "messages[0].function_call", "goes in an assistant message");
  bad_message(1, {{"role", "assistant"}, {"function_call", {{"name", "time"}, {"arguments", "{"}}}},
              "messages[1].function_call.arguments", "");
  bad_message(1, {{"role", "assistant"}, {"function_call", {{"name", "time"}}}},
              "messages[1].function_call", "must be {\"name\": string");

  // The model's answer: one call at most, as function_call.
  ToolSet set = Set(ToolChoice::kAuto);
  set.legacy = true;
  const std::string one = "<tool_call>{\"name\": \"time\", \"arguments\": {}}</tool_call>";
  EXPECT_EQ(ReadToolAnswer(one, set).calls.size(), 1u);
  EXPECT_TRUE(ReadToolAnswer(one + one, set).calls.empty());
  EXPECT_EQ(ReadToolAnswer(one + one, set).content, one + one);
  ChatAnswer a;
  a.id = "chatcmpl-1";
  a.finish_reason = kFunctionCallFinish;
  a.tool_calls = {{"call_1", "time", R"({"zone":"CET"})"}};
  const json answer = json::parse(ChatCompletionJson({a}, TurnUsage{}));
  const json& message = answer["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_FALSE(message.contains("tool_calls"));
  EXPECT_EQ(message["function_call"], json({{"name", "time"}, {"arguments", R"({"zone":"CET"})"}}));
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "function_call");
  const std::string event =
      ChatToolCallsChunkEvent(a, a.tool_calls, true, {}, /*function_call=*/true);
  ASSERT_TRUE(event.starts_with("data: "));
  const json delta = json::parse(event.substr(6))["choices"][0]["delta"];
  EXPECT_FALSE(delta.contains("tool_calls"));
  EXPECT_EQ(delta["function_call"], json({{"name", "time"}, {"arguments", R"({"zone":"CET"})"}}));
}

// JSON nested deeper than kMaxJsonDepth, anywhere a request carries JSON (the body; a
// call's arguments and a schema given as text; the model's own text read for calls), is
// refused or read as no JSON before anything walks it recursively: nested a million
// levels it overflowed the stack of the thread that rendered, dumped or compiled it.
TEST(OpenAiProtocolTest, DeeplyNestedJsonIsRefusedBeforeItIsWalked) {
  auto nest = [](int levels, const std::string& inner) {
    return std::string(levels, '[') + inner + std::string(levels, ']');
  };
  const std::string deep = nest(1 << 20, "1");
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], )";
  const std::string tool = R"({"type": "function", "function": {"name": "f"}})";
  const auto refused = [](const absl::Status& s, const std::string& text) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(text));
  };
  const std::string body_text = "the request body nests arrays and objects deeper than 100";
  // The body: in tools' parameters, in a schema, in an ignored field, for every endpoint.
  refused(
      ParseChatCompletionRequest(chat + R"("tools": [{"type": "function", "function": {"name": "f",
                 "parameters": {"type": "object", "x": )" +
                                 deep + "}}}]}")
          .status(),
      body_text);
  refused(ParseChatCompletionRequest(chat + R"("response_format": {"type": "json_schema",
              "json_schema": {"name": "a", "schema": {"x": )" +
                                     deep + "}}}}")
              .status(),
          body_text);
  refused(ParseChatCompletionRequest(chat + R"("metadata": )" + deep + "}").status(), body_text);
  refused(ParseCompletionRequest(R"({"prompt": "a", "x": )" + deep + "}").status(), body_text);
  refused(ParseResponsesRequest(R"({"input": "a", "x": )" + deep + "}").status(), body_text);
  refused(ParseTokenizeRequest(R"({"prompt": "a", "x": )" + deep + "}").status(), body_text);
  refused(ParseDetokenizeRequest(R"({"tokens": [1], "x": )" + deep + "}").status(), body_text);
  // JSON text inside strings: a call's arguments, a schema as text.
  const std::string arguments = json(deep).dump();
  auto r = ParseChatCompletionRequest(
      R"({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
         "function": {"name": "f", "arguments": )" +
      arguments + "}}]}], \"tools\": [" + tool + "]}");
  refused(r.status(), "nests arrays and objects deeper than 100 levels");
  EXPECT_EQ(std::string(r.status().message()).find("messages[1].tool_calls[0].function.arguments"),
            0u)
      << r.status();
  refused(
      ParseChatCompletionRequest(chat + R"("guided_json": )" + json(deep).dump() + "}").status(),
      "'guided_json' nests arrays and objects deeper than 100 levels");
  // At the limit the same forms are taken (the body's object is the first level).
  const std::string at_limit = nest(kMaxJsonDepth - 1, "1");
  EXPECT_TRUE(ParseChatCompletionRequest(chat + R"("metadata": )" + at_limit + "}").ok());
  EXPECT_FALSE(ParseChatCompletionRequest(chat + R"("metadata": [)" + at_limit + "]}").ok());
  // The model's text: a call too deep to walk is no call, and the text stays content.
  auto tools = ParseTools(nlohmann::ordered_json::parse("{\"tools\": [" + tool + "]}"));
  ASSERT_TRUE(tools.ok()) << tools.status();
  const std::string text =
      R"(<tool_call>{"name": "f", "arguments": {"a": )" + deep + "}}</tool_call>";
  ToolAnswer answer = ReadToolAnswer(text, *tools);
  EXPECT_TRUE(answer.calls.empty());
  EXPECT_EQ(answer.content, text);
  const std::string shallow = R"(<tool_call>{"name": "f", "arguments": {"a": )" +
                              nest(kMaxJsonDepth - 3, "1") + "}}</tool_call>";
  EXPECT_EQ(ReadToolAnswer(shallow, *tools).calls.size(), 1u);
  // What renders tool JSON text and what compiles schemas refuse it too.
  refused(PythonJsonOf(deep, -1, "a tool").status(),
          "a tool nests arrays and objects deeper than 100 levels");
  refused(structured::Grammar::FromSchema(R"({"x": )" + deep + "}").status(),
          "the schema nests arrays and objects deeper than 100 levels");
}

TEST(StopMatcherTest, HoldsBackPrefixesAndNeverEmitsTheStop) {
  StopMatcher m({"END", "\nUser:"});
  std::string shown = m.Push("Hello E");
  EXPECT_EQ(shown, "Hello ");  // "E" might start END
  shown += m.Push("N");
  shown += m.Push("x and \nUs");
  EXPECT_EQ(shown, "Hello ENx and ");
  EXPECT_FALSE(m.stopped());
  shown += m.Push("er: more");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(shown, "Hello ENx and ");
  EXPECT_EQ(m.Push("anything"), "");
  EXPECT_EQ(m.Flush(), "");
  StopMatcher tail({"END"});
  EXPECT_EQ(tail.Push("aEN"), "a");
  EXPECT_EQ(tail.Flush(), "EN");
  StopMatcher none({});
  EXPECT_EQ(none.Push("abc"), "abc");
}

// Random texts over a small alphabet, random stop sets and random chunkings against a
// reference that looks at the whole text after each chunk: the shown text is everything
// before the earliest stop in the first chunk's text that holds one (no stop spans the
// shown text, and what was shown never changes), or all of it when none completes.
TEST(StopMatcherTest, ChunkedTextMatchesTheWholeTextReference) {
  std::mt19937 rng(7);
  auto pick = [&rng](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  auto word = [&](size_t max_len) {
    std::string w(1 + pick(max_len), ' ');
    for (char& c : w) c = "abc\n"[pick(4)];
    return w;
  };
  int stopped = 0;
  for (int i = 0; i < 5000; ++i) {
    std::vector<std::string> stops(pick(4) + 1);
    for (std::string& s : stops) s = word(4);
    const std::string text = word(40);
    std::vector<std::string> chunks;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min(text.size() - at, 1 + pick(5));
      chunks.push_back(text.substr(at, n));
      at += n;
    }
    std::string expected = text, so_far;
    bool expect_stop = false;
    for (const std::string& chunk : chunks) {
      so_far += chunk;
      size_t cut = std::string::npos;
      for (const std::string& s : stops) cut = std::min(cut, so_far.find(s));
      if (cut != std::string::npos) {
        expected = so_far.substr(0, cut);
        expect_stop = true;
        break;
      }
    }
    StopMatcher m(stops);
    std::string shown;
    for (const std::string& chunk : chunks) shown += m.Push(chunk);
    shown += m.Flush();
    ASSERT_EQ(shown, expected) << "text " << text << " stops " << stops.size();
    ASSERT_EQ(m.stopped(), expect_stop) << text;
    stopped += expect_stop;
  }
  // Both ends occur: texts cut by a stop and texts shown whole.
  EXPECT_GT(stopped, 1000);
  EXPECT_LT(stopped, 4900);
}

TEST(OpenAiProtocolTest, TokenizeAndDetokenizeRequests) {
  auto prompt = ParseTokenizeRequest(R"({"prompt": "Hi", "add_special_tokens": false})");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->prompt, "Hi");
  EXPECT_FALSE(prompt->add_special_tokens);
  EXPECT_FALSE(prompt->return_token_strs);
  auto chat = ParseTokenizeRequest(
      R"({"messages": [{"role": "assistant", "content": "A"}], "continue_final_message": true})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_FALSE(chat->prompt.has_value());
  EXPECT_EQ(chat->messages.size(), 1u);
  EXPECT_FALSE(chat->add_generation_prompt);  // implied by continue_final_message
  for (const char* bad : {R"({})", R"({"prompt": "a", "messages": []})", R"({"prompt": ["a"]})",
                          R"({"prompt": "a", "return_token_strs": 1})"}) {
    EXPECT_EQ(ParseTokenizeRequest(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto ids = ParseDetokenizeRequest(R"({"tokens": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(ParseDetokenizeRequest(R"({"tokens": []})").ok());
  for (const char* bad : {R"({})", R"({"tokens": [1.5]})", R"({"tokens": [4294967296]})"}) {
    EXPECT_EQ(ParseDetokenizeRequest(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  const std::vector<std::string> strs = {"<s>", "Hi"};
  const json out = json::parse(TokenizeJson({1, 7}, 4096, &strs));
  EXPECT_EQ(out["count"], 2);
  EXPECT_EQ(out["max_model_len"], 4096);
  EXPECT_EQ(out["tokens"], json({1, 7}));
  EXPECT_EQ(out["token_strs"], json({"<s>", "Hi"}));
  EXPECT_FALSE(json::parse(TokenizeJson({1}, 4096, nullptr)).contains("token_strs"));
}

// What a response's version keeps reads back as written; input items list OpenAI's way
// (string content as parts, ids given); a record of another shape is DATA_LOSS.
TEST(OpenAiProtocolTest, StoredResponsesRoundTripAndBadRecordsAreDataLoss) {
  auto request = ParseResponsesRequest(
      R"({"input": [{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello", "id": "mine"},
                    {"type": "function_call_output", "call_id": "c1", "output": "42"}]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->store);
  EXPECT_EQ(json::parse(request->input_items), json::parse(R"([
    {"id": "item_0", "type": "message", "role": "user",
     "content": [{"type": "input_text", "text": "hi"}]},
    {"id": "mine", "type": "message", "role": "assistant",
     "content": [{"type": "output_text", "text": "hello"}]},
    {"id": "item_2", "type": "function_call_output", "call_id": "c1", "output": "42"}])"));
  EXPECT_FALSE(ParseResponsesRequest(R"({"input": "hi", "store": false})")->store);

  StoredResponse kept;
  kept.answer.model = "m";
  kept.answer.created = 1700000000;
  kept.answer.text = "caf\xc3\xa9";
  kept.answer.tool_calls = {{"call_1", "get_weather", R"({"city":"Oslo"})"}};
  kept.answer.finish_reason = "tool_calls";
  kept.echo = R"({"previous_response_id":"resp_1_s","metadata":{"k":"v"}})";
  kept.input_items = request->input_items;
  auto back = ParseStoredResponse(StoredResponseJson(kept));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->answer.model, "m");
  EXPECT_EQ(back->answer.created, 1700000000);
  EXPECT_EQ(back->answer.text, kept.answer.text);
  ASSERT_EQ(back->answer.tool_calls.size(), 1u);
  EXPECT_EQ(back->answer.tool_calls[0].id, "call_1");
  EXPECT_EQ(back->answer.tool_calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(back->answer.finish_reason, "tool_calls");
  EXPECT_EQ(json::parse(back->echo), json::parse(kept.echo));
  EXPECT_EQ(json::parse(back->input_items), json::parse(kept.input_items));
  // Input items over the limit are not kept; the response is.
  kept.input_items = "[\"" + std::string(kMaxKeptInputBytes, 'x') + "\"]";
  back = ParseStoredResponse(StoredResponseJson(kept));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->input_items.empty());
  for (const char* bad : {"", "[]", "{}", R"({"model": 1})",
                          R"({"model": "m", "created": 1, "echo": {}, "text": "",
                              "finish_reason": "", "tool_calls": [{}], "input_items": null})",
                          R"({"model": "m", "created": 1, "echo": {}, "text": "",
                              "finish_reason": "", "tool_calls": [], "input_items": 3})"}) {
    EXPECT_EQ(ParseStoredResponse(bad).status().code(), absl::StatusCode::kDataLoss) << bad;
  }
  EXPECT_TRUE(ParseStoredResponse(
                  R"({"model": "m", "created": 1, "echo": {}, "text": "",
                      "finish_reason": "", "tool_calls": [], "input_items": null})")
                  .ok());
}

// A response object repeats its request's fields, as given or OpenAI's defaults; metadata
// is checked as OpenAI checks it.
TEST(OpenAiProtocolTest, ResponsesRepeatTheirRequestsFields) {
  auto bare = ParseResponsesRequest(R"({"input": "hi"})");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(json::parse(bare->echo), json::parse(R"({
    "previous_response_id": null, "instructions": null, "metadata": {},
    "max_output_tokens": null, "temperature": 1, "top_p": 1, "tools": [],
    "tool_choice": "auto", "parallel_tool_calls": true,
    "text": {"format": {"type": "text"}}, "store": true})"));
  auto given = ParseResponsesRequest(
      R"({"input": "hi", "instructions": "be brief", "previous_response_id": "resp_2_s",
          "metadata": {"user": "u1"}, "max_output_tokens": 9, "temperature": 0.7, "top_p": 0.9,
          "store": false, "text": {"format": {"type": "json_object"}},
          "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
          "tool_choice": "none", "parallel_tool_calls": false})");
  ASSERT_TRUE(given.ok()) << given.status();
  const json echo = json::parse(given->echo);
  EXPECT_EQ(echo["instructions"], "be brief");
  EXPECT_EQ(echo["previous_response_id"], "resp_2_s");
  EXPECT_EQ(echo["metadata"], json({{"user", "u1"}}));
  EXPECT_EQ(echo["max_output_tokens"], 9);
  EXPECT_EQ(echo["temperature"], 0.7);
  EXPECT_EQ(echo["top_p"], 0.9);
  EXPECT_EQ(echo["store"], false);
  EXPECT_EQ(echo["text"]["format"]["type"], "json_object");
  EXPECT_EQ(echo["tools"][0]["name"], "f");
  EXPECT_EQ(echo["tool_choice"], "none");
  EXPECT_EQ(echo["parallel_tool_calls"], false);
  ChatAnswer a;
  a.id = "resp_3_s";
  a.finish_reason = "stop";
  const json object = json::parse(ResponseJson(a, given->echo));
  for (const auto& [key, value] : echo.items()) EXPECT_EQ(object[key], value) << key;
  EXPECT_EQ(object["usage"]["output_tokens_details"]["reasoning_tokens"], 0);

  std::string many = "{";
  for (int i = 0; i < 17; ++i) many += absl::StrCat(i ? "," : "", "\"k", i, "\": \"v\"");
  many += "}";
  for (const std::string& metadata : {std::string("[]"), std::string(R"({"k": 1})"), many,
                                      R"({")" + std::string(65, 'k') + R"(": "v"})",
                                      R"({"k": ")" + std::string(513, 'v') + R"("})"}) {
    auto bad = ParseResponsesRequest(R"({"input": "hi", "metadata": )" + metadata + "}");
    ASSERT_FALSE(bad.ok()) << metadata;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ErrorJson(bad.status()), HasSubstr(R"("param":"metadata")")) << bad.status();
  }
  EXPECT_TRUE(ParseResponsesRequest(R"({"input": "hi", "metadata": {")" + std::string(64, 'k') +
                                    R"(": ")" + std::string(512, 'v') + R"("}})")
                  .ok());
  // Characters, not bytes: 64 two-byte characters are a key OpenAI takes.
  std::string wide_key;
  for (int i = 0; i < 64; ++i) wide_key += "\xc3\xa9";
  EXPECT_TRUE(
      ParseResponsesRequest(R"({"input": "hi", "metadata": {")" + wide_key + R"(": "v"}})").ok());
  EXPECT_FALSE(ParseResponsesRequest(R"({"input": "hi", "metadata": {")" + wide_key + "\xc3\xa9" +
                                     R"(": "v"}})")
                   .ok());
}

TEST(OpenAiProtocolTest, InputItemsPageBetweenCursors) {
  const std::string items = R"([{"id": "a"}, {"id": "b"}, {"id": "c"}])";
  auto ids = [&](const std::string& query) {
    auto page = InputItemsPage(items, query);
    EXPECT_TRUE(page.ok()) << query << ": " << page.status();
    std::string out;
    const json j = json::parse(page.value_or("{}"));
    for (const json& item : j["data"]) out += item["id"].get<std::string>();
    return out + (j["has_more"] == true ? "+" : "");
  };
  EXPECT_EQ(ids(""), "cba");
  EXPECT_EQ(ids("order=asc"), "abc");
  EXPECT_EQ(ids("limit=2"), "cb+");
  EXPECT_EQ(ids("limit=2&after=b"), "a");
  EXPECT_EQ(ids("order=asc&after=a&before=c"), "b");
  EXPECT_EQ(ids("order=asc&after=c"), "");
  EXPECT_EQ(ids("order=asc&after=c&before=a"), "");  // an empty range
  EXPECT_EQ(ids("limit=1&before=a"), "c+");
  const json empty = json::parse(InputItemsPage(items, "order=asc&after=c").value());
  EXPECT_TRUE(empty["first_id"].is_null());
  EXPECT_EQ(empty["has_more"], false);
  EXPECT_EQ(InputItemsPage("{}", "").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvfold::http
