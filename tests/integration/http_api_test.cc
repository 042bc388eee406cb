// The OpenAI-compatible HTTP API of real kvfold-inference replicas (stories260K, a random
// projector, a real kvfold-memory), spoken to over loopback HTTP: answers equal the gRPC
// path's tokens, streaming, sessions, response chains across replicas and forks, errors,
// and a client that disconnects mid-stream.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/common/prometheus_text.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

TEST_F(HttpApiTest, ModelsHealthAndMetrics) {
  HttpReply models = HttpCall(port_[0], "GET", "/v1/models", "", kAuth);
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(Body(models)["data"][0]["id"], "stories260K");
  EXPECT_EQ(Body(models)["object"], "list");
  // One model: its id, percent-escapes decoded; another name is a 404 about `model`.
  for (const char* path : {"/v1/models/stories260K", "/v1/models/stories260%4B"}) {
    HttpReply one = HttpCall(port_[0], "GET", path, "", kAuth);
    ASSERT_EQ(one.status, 200) << path << ": " << one.body;
    EXPECT_EQ(Body(one), Body(models)["data"][0]);
  }
  for (const char* path : {"/v1/models/gpt-4", "/v1/models/stories260%4", "/v1/models/%zz"}) {
    HttpReply other = HttpCall(port_[0], "GET", path, "", kAuth);
    EXPECT_EQ(other.status, 404) << path << ": " << other.body;
    EXPECT_EQ(Body(other)["error"]["param"], "model") << other.body;
  }
  EXPECT_EQ(HttpCall(port_[0], "GET", "/v1/models/stories260K", "").status, 401);
  EXPECT_EQ(HttpCall(port_[0], "DELETE", "/v1/models/stories260K", "", kAuth).status, 405);
  // Ready once the replica's health loop has seen the store answer (about a second) and
  // its KV pool is populated; until then 503 says which.
  HttpReply health;
  for (int i = 0; i < 100; ++i) {
    health = HttpCall(port_[0], "GET", "/health");
    if (health.status == 200) break;
    EXPECT_EQ(health.status, 503) << health.body;
    EXPECT_THAT(Body(health)["status"].get<std::string>(),
                ::testing::AnyOf(HasSubstr("memory store unavailable"),
                                 HasSubstr("KV pool being populated")));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(Body(health)["status"], "ok");
  EXPECT_EQ(HttpCall(port_[0], "GET", "/health/live").status, 200);
  HttpReply metrics = HttpCall(port_[0], "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  const PromPage page = ParsePrometheusText(metrics.body);
  EXPECT_THAT(page.errors, ::testing::IsEmpty());
  // Ready: the whole pool is populated.
  EXPECT_GT(page.Value("kvfold_kv_pool_bytes"), 0);
  EXPECT_EQ(page.Value("kvfold_kv_populated_bytes"), page.Value("kvfold_kv_pool_bytes"));
}

TEST_F(HttpApiTest, ChatCompletionEqualsTheGrpcPathAndStreamsTheSameText) {
  HttpReply r = Post(0, "/v1/chat/completions", kChat);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  const std::string text = body["choices"][0]["message"]["content"];
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");

  // The same prompt through gRPC: the plain template's ids, greedy.
  auto tokenizer = Tokenizer::Load(std::filesystem::path(SharedModel()).parent_path().string());
  ASSERT_TRUE(tokenizer.ok());
  auto chat = ChatTemplate::Create(ChatFormat::kPlain, tokenizer->get());
  ASSERT_TRUE(chat.ok());
  auto ids = chat->RenderIds(std::vector<ChatMessage>{{"user", "Tell me about a cat."}}, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(body["usage"]["prompt_tokens"], ids->size());
  const std::vector<int32_t> grpc_ids = GrpcGreedy("grpc-ref-chat", *ids, 12);
  IncrementalDecoder decoder(tokenizer->get(), /*at_text_start=*/false);
  std::string grpc_text;
  for (int32_t id : grpc_ids) grpc_text += decoder.Push(id);
  grpc_text += decoder.Flush();
  EXPECT_EQ(text, grpc_text);
  EXPECT_FALSE(text.empty());

  json streamed = kChat;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  HttpReply s = Post(1, "/v1/chat/completions", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_THAT(s.Header("Content-Type"), HasSubstr("text/event-stream"));
  const std::vector<std::string> events = s.Events();
  ASSERT_GE(events.size(), 3u) << s.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string joined;
  int usage_chunks = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    if (e["choices"].empty()) {
      ++usage_chunks;
      EXPECT_EQ(e["usage"]["completion_tokens"], 12);
      continue;
    }
    if (i == 0) {
      EXPECT_EQ(e["choices"][0]["delta"]["role"], "assistant");
    }
    joined += e["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(usage_chunks, 1);
  EXPECT_EQ(joined, text);
}

// gRPC's messages form renders with the same template: the same tokens as the rendered ids.
TEST_F(HttpApiTest, GrpcMessagesFormUsesTheChatTemplate) {
  auto tokenizer = Tokenizer::Load(std::filesystem::path(SharedModel()).parent_path().string());
  ASSERT_TRUE(tokenizer.ok());
  auto chat = ChatTemplate::Create(ChatFormat::kPlain, tokenizer->get());
  ASSERT_TRUE(chat.ok());
  const std::vector<ChatMessage> messages = {{"system", "A story."}, {"user", "A dog"}};
  auto ids = chat->RenderIds(messages, {});
  ASSERT_TRUE(ids.ok());
  const std::vector<int32_t> want = GrpcGreedy("grpc-ids-form", *ids, 10);
  ASSERT_TRUE(CreateGrpcSession(1, "grpc-messages-form").ok());
  grpc::ClientContext context;
  Authorize(&context);
  v1::GenerateRequest request;
  request.set_session_id("grpc-messages-form");
  for (const ChatMessage& m : messages) {
    v1::ChatMessage* out = request.add_messages();
    out->set_role(m.role);
    out->set_content(m.content);
  }
  request.mutable_sampling()->set_max_new_tokens(10);
  request.mutable_sampling()->set_top_k(1);
  auto reader = cluster_->stub(1).Generate(&context, request);
  std::vector<int32_t> got;
  v1::GenerateResponse response;
  uint32_t prompt_tokens = 0;
  while (reader->Read(&response)) {
    for (int32_t id : response.delta().token_ids()) got.push_back(id);
    if (response.has_final()) prompt_tokens = response.final().usage().prompt_tokens();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(prompt_tokens, ids->size());
  // A role the template refuses is INVALID_ARGUMENT.
  grpc::ClientContext bad_context;
  Authorize(&bad_context);
  request.mutable_messages(0)->set_role("robot");
  auto bad = cluster_->stub(1).Generate(&bad_context, request);
  while (bad->Read(&response)) {
  }
  EXPECT_EQ(bad->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(HttpApiTest, StopStringsAreNeverEmitted) {
  HttpReply full = Post(0, "/v1/chat/completions", kChat);
  ASSERT_EQ(full.status, 200);
  const std::string text = Body(full)["choices"][0]["message"]["content"];
  ASSERT_GE(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 3);
  json with_stop = kChat;
  with_stop["stop"] = {stop, "never-in-the-text"};
  HttpReply r = Post(0, "/v1/chat/completions", with_stop);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["choices"][0]["message"]["content"], text.substr(0, text.find(stop)));
  EXPECT_EQ(Body(r)["choices"][0]["finish_reason"], "stop");
}

// A prompt of token ids is fed as given: the text prompt's ids (BOS included) give the text
// prompt's answer; echo returns the ids' text.
TEST_F(HttpApiTest, CompletionsTakeTokenIdPrompts) {
  const std::string prompt = "Once upon a time";
  HttpReply text =
      Post(0, "/v1/completions",
           {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}, {"echo", true}});
  ASSERT_EQ(text.status, 200) << text.body;
  auto tokenizer = Tokenizer::Load(std::filesystem::path(SharedModel()).parent_path().string());
  ASSERT_TRUE(tokenizer.ok());
  auto ids = (*tokenizer)->Encode(prompt, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  for (const json& as_sent : {json(*ids), json::array({*ids})}) {
    HttpReply r =
        Post(1, "/v1/completions",
             {{"prompt", as_sent}, {"max_tokens", 16}, {"temperature", 0}, {"echo", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Body(r)["choices"][0]["text"], Body(text)["choices"][0]["text"]);
    EXPECT_EQ(Body(r)["usage"]["prompt_tokens"], ids->size());
  }
  // Without BOS the ids are another prompt, and the answer follows them.
  std::vector<int32_t> no_bos(ids->begin() + 1, ids->end());
  HttpReply bare =
      Post(0, "/v1/completions", {{"prompt", no_bos}, {"max_tokens", 16}, {"temperature", 0}});
  ASSERT_EQ(bare.status, 200) << bare.body;
  EXPECT_EQ(Body(bare)["usage"]["prompt_tokens"], no_bos.size());

  HttpReply outside = Post(0, "/v1/completions", {{"prompt", {1, 512}}});
  EXPECT_EQ(outside.status, 400) << outside.body;
  EXPECT_EQ(Body(outside)["error"]["param"], "prompt") << outside.body;
  EXPECT_THAT(outside.body, ::testing::HasSubstr("prompt token id 512 outside [0, 512)"));
  // In a batch, the prompt at fault is named.
  HttpReply second = Post(0, "/v1/completions", {{"prompt", {{1, 2}, {1, 600}}}});
  EXPECT_EQ(second.status, 400) << second.body;
  EXPECT_EQ(Body(second)["error"]["param"], "prompt") << second.body;
  EXPECT_THAT(second.body, ::testing::HasSubstr("prompt 1: prompt token id 600 outside"));
}

TEST_F(HttpApiTest, ErrorsUseOpenAiShapesAndStatuses) {
  HttpReply no_auth = Post(0, "/v1/chat/completions", kChat, {});
  EXPECT_EQ(no_auth.status, 401);
  EXPECT_EQ(Body(no_auth)["error"]["type"], "authentication_error");
  HttpReply bad_token = Post(0, "/v1/chat/completions", kChat, {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(bad_token.status, 401);
  json n2 = kChat;
  n2["n"] = 2;
  n2["kvfold_session"] = "one-answer";
  HttpReply r = Post(0, "/v1/chat/completions", n2);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Body(r)["error"]["message"].get<std::string>(),
              HasSubstr("a kvfold session keeps one answer (n = 1)"));
  EXPECT_EQ(Body(r)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(Body(r)["error"]["param"], "n");
  HttpReply not_json = HttpCall(port_[0], "POST", "/v1/chat/completions", "{not json", kAuth);
  EXPECT_EQ(not_json.status, 400);
  EXPECT_TRUE(Body(not_json)["error"]["param"].is_null()) << not_json.body;
  json five_stops = kChat;
  five_stops["stop"] = {"a", "b", "c", "d", "e"};
  EXPECT_EQ(Post(0, "/v1/chat/completions", five_stops).status, 400);
  json unknown_model = kChat;
  unknown_model["model"] = "gpt-17";
  EXPECT_EQ(Post(0, "/v1/chat/completions", unknown_model).status, 404);
  HttpReply missing =
      Post(0, "/v1/responses", {{"input", "hi"}, {"previous_response_id", "resp_9_nosuchsession"}});
  EXPECT_EQ(missing.status, 404) << missing.body;
  EXPECT_EQ(Body(missing)["error"]["param"], "previous_response_id");
  HttpReply malformed =
      Post(0, "/v1/responses", {{"input", "hi"}, {"previous_response_id", "chatcmpl-1"}});
  EXPECT_EQ(malformed.status, 404) << malformed.body;
  EXPECT_EQ(Body(malformed)["error"]["param"], "previous_response_id");
  EXPECT_EQ(HttpCall(port_[0], "GET", "/v1/nothing", "", kAuth).status, 404);
}

TEST_F(HttpApiTest, ResponsesChainAcrossReplicasAndFork) {
  json first = {{"model", "stories260K"},
                {"input", "Once upon a time"},
                {"max_output_tokens", 8},
                {"temperature", 0}};
  HttpReply r1 = Post(0, "/v1/responses", first);
  ASSERT_EQ(r1.status, 200) << r1.body;
  const std::string id1 = Body(r1)["id"];
  EXPECT_EQ(Body(r1)["object"], "response");
  std::string previous = id1;
  std::string id3;
  for (int i = 0; i < 2; ++i) {  // replica 1, then replica 0
    HttpReply r = Post((i + 1) % 2, "/v1/responses",
                       {{"input", "And then?"},
                        {"previous_response_id", previous},
                        {"max_output_tokens", 8},
                        {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Body(r)["previous_response_id"], previous);
    EXPECT_EQ(Body(r)["usage"]["kvfold"]["session_id"], Body(r1)["usage"]["kvfold"]["session_id"]);
    previous = Body(r)["id"];
  }
  id3 = previous;
  // A fork from the first response: a new session, the chain's head untouched.
  HttpReply fork = Post(1, "/v1/responses",
                        {{"input", "And then?"},
                         {"previous_response_id", id1},
                         {"max_output_tokens", 8},
                         {"temperature", 0}});
  ASSERT_EQ(fork.status, 200) << fork.body;
  EXPECT_NE(Body(fork)["usage"]["kvfold"]["session_id"], Body(r1)["usage"]["kvfold"]["session_id"]);
  // Forking from the first response gives the chain's second answer again (greedy).
  HttpReply second = Post(0, "/v1/responses",
                          {{"input", "And then?"},
                           {"previous_response_id", id1},
                           {"max_output_tokens", 8},
                           {"temperature", 0}});
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(Body(second)["output"][0]["content"][0]["text"],
            Body(fork)["output"][0]["content"][0]["text"]);
  // The chain still continues from its head.
  HttpReply after =
      Post(0, "/v1/responses",
           {{"input", "The end."}, {"previous_response_id", id3}, {"max_output_tokens", 4}});
  EXPECT_EQ(after.status, 200) << after.body;
}

// POST /v1/responses/input_tokens counts what the create of the same fields feeds (its
// usage.input_tokens), on either replica: a new chain (instructions, tools), a
// continuation of a response the token limit cut (the assistant's turn closed first), of
// one the model ended itself, and of an older response (a fork). Errors name their field.
TEST_F(HttpApiTest, ResponsesCountTheInputTokensTheirTurnsFeed) {
  auto count = [&](int replica, const json& fields) {
    HttpReply r = Post(replica, "/v1/responses/input_tokens", fields);
    EXPECT_EQ(r.status, 200) << r.body;
    const json body = Body(r);
    EXPECT_EQ(body["object"], "response.input_tokens") << body;
    return body.value("input_tokens", -1);
  };
  auto create = [&](int replica, json fields, int max_output_tokens) {
    fields["max_output_tokens"] = max_output_tokens;
    fields["temperature"] = 0;
    HttpReply r = Post(replica, "/v1/responses", fields);
    EXPECT_EQ(r.status, 200) << r.body;
    return Body(r);
  };
  const json tool = {{"type", "function"},
                     {"name", "get_weather"},
                     {"parameters",
                      {{"type", "object"},
                       {"properties", {{"city", {{"type", "string"}}}}},
                       {"required", {"city"}}}}};
  const json first = {{"model", "stories260K"},
                      {"instructions", "Tell a short story."},
                      {"input", "Once upon a time"}};
  json with_tools = first;
  with_tools["tools"] = {tool};
  with_tools["tool_choice"] = "auto";
  const int first_count = count(1, first), tools_count = count(0, with_tools);
  EXPECT_GT(tools_count, first_count);  // the template shows the tool
  const json r1 = create(0, first, 8);
  EXPECT_EQ(r1["usage"]["input_tokens"], first_count) << r1;
  EXPECT_EQ(create(1, with_tools, 4)["usage"]["input_tokens"], tools_count);
  EXPECT_EQ(count(0, {{"input", "Once upon a time"}}),
            count(1, {{"input", {{{"role", "user"}, {"content", "Once upon a time"}}}}}));

  // Continuations: r1 was cut by its limit (status incomplete), so its continuation closes
  // the assistant's turn first; a long answer ends with the model's end-of-turn.
  ASSERT_EQ(r1["status"], "incomplete");
  const std::string id1 = r1["id"];
  const json next = {{"previous_response_id", id1}, {"input", "And then?"}};
  const int next_count = count(1, next);
  // The end-of-turn id (stories260K's template ends a turn with EOS, id 2) made certain.
  json next_ended = next;
  next_ended["logit_bias"] = {{"2", 100}};
  const json r2 = create(1, next_ended, 4);
  EXPECT_EQ(r2["usage"]["input_tokens"], next_count) << r2;
  const json after_r2 = {{"previous_response_id", r2["id"]}, {"input", "And then?"}};
  const int after_count = count(0, after_r2);
  EXPECT_EQ(create(0, after_r2, 4)["usage"]["input_tokens"], after_count);
  // r2 ended itself (its end-of-turn id), so its continuation renders no closing text:
  // fewer tokens than the continuation of r1, which the limit cut.
  EXPECT_EQ(r2["status"], "completed") << r2;
  EXPECT_LT(after_count, next_count);
  // An older response: the create forks it; the count continues that version.
  EXPECT_EQ(count(0, next), next_count);
  EXPECT_EQ(create(0, next, 4)["usage"]["input_tokens"], next_count);

  // Errors.
  auto error = [&](int status, const json& fields, const char* param) {
    HttpReply r = Post(0, "/v1/responses/input_tokens", fields);
    EXPECT_EQ(r.status, status) << fields << ": " << r.body;
    EXPECT_EQ(Body(r)["error"]["param"], param == nullptr ? json() : json(param)) << r.body;
  };
  error(404, {{"previous_response_id", "resp_1_no-such-session"}, {"input", "x"}},
        "previous_response_id");
  error(404,
        {{"previous_response_id",
          "resp_99_" + r1["usage"]["kvfold"]["session_id"].get<std::string>()},
         {"input", "x"}},
        "previous_response_id");
  error(404, {{"previous_response_id", "not-a-response"}, {"input", "x"}}, "previous_response_id");
  error(400, {{"input", "x"}, {"stream", true}}, "stream");
  error(400, {{"input", "x"}, {"conversation", "conv_1"}}, "conversation");
  error(400, {{"input", 3}}, "input");
  error(404, {{"input", "x"}, {"model", "gpt-4o"}}, nullptr);
  EXPECT_EQ(HttpCall(port_[0], "GET", "/v1/responses/input_tokens", "", kAuth).status, 405);
  EXPECT_EQ(Post(0, "/v1/responses/input_tokens", {{"input", "x"}}, {}).status, 401);
}

// A stored response reads back as it was created, from either replica: GET
// /v1/responses/{id} gives the same object (text, status, usage, chain), its input items
// list pages as OpenAI's do; `store: false` keeps none, and a version that chat wrote is
// no response.
TEST_F(HttpApiTest, ResponsesReadBackAsCreatedWithTheirInputItems) {
  auto get = [&](int replica, const std::string& path) {
    return HttpCall(port_[replica], "GET", path, "", kAuth);
  };
  json request = {{"model", "stories260K"},
                  {"instructions", "Tell a short story."},
                  {"input",
                   {{{"role", "user"}, {"content", "Once upon a time"}},
                    {{"type", "message"},
                     {"role", "user"},
                     {"content", {{{"type", "input_text"}, {"text", "there was a cat"}}}}}}},
                  {"max_output_tokens", 8},
                  {"temperature", 0},
                  {"metadata", {{"agent", "a1"}}}};
  HttpReply r1 = Post(0, "/v1/responses", request);
  ASSERT_EQ(r1.status, 200) << r1.body;
  const json first = Body(r1);
  const std::string id1 = first["id"];
  EXPECT_EQ(first["status"], "incomplete");  // the token limit: the runtime's finish reason
  // The request's fields, repeated as OpenAI's objects repeat them.
  EXPECT_EQ(first["instructions"], "Tell a short story.");
  EXPECT_EQ(first["metadata"], json({{"agent", "a1"}}));
  EXPECT_EQ(first["max_output_tokens"], 8);
  EXPECT_EQ(first["temperature"], 0);
  EXPECT_EQ(first["store"], true);
  for (int replica : {0, 1}) {
    HttpReply again = get(replica, "/v1/responses/" + id1);
    ASSERT_EQ(again.status, 200) << again.body;
    EXPECT_EQ(Body(again), first);
  }

  // Input items: newest first by default, the string content as a part, ids given.
  HttpReply items = get(1, "/v1/responses/" + id1 + "/input_items");
  ASSERT_EQ(items.status, 200) << items.body;
  const json list = Body(items);
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 2u) << list;
  EXPECT_EQ(list["data"][0]["id"], "item_1");
  EXPECT_EQ(list["data"][0]["content"][0]["text"], "there was a cat");
  EXPECT_EQ(list["data"][1],
            json({{"id", "item_0"},
                  {"type", "message"},
                  {"role", "user"},
                  {"content", {{{"type", "input_text"}, {"text", "Once upon a time"}}}}}));
  EXPECT_EQ(list["first_id"], "item_1");
  EXPECT_EQ(list["last_id"], "item_0");
  EXPECT_EQ(list["has_more"], false);
  // Pages: one item, then the one after it; ascending order; before a cursor.
  const json page1 = Body(get(0, "/v1/responses/" + id1 + "/input_items?limit=1"));
  ASSERT_EQ(page1["data"].size(), 1u) << page1;
  EXPECT_EQ(page1["has_more"], true);
  const json page2 = Body(get(0, "/v1/responses/" + id1 + "/input_items?limit=1&after=" +
                                     page1["last_id"].get<std::string>()));
  ASSERT_EQ(page2["data"].size(), 1u) << page2;
  EXPECT_EQ(page2["data"][0], list["data"][1]);
  EXPECT_EQ(page2["has_more"], false);
  const json asc = Body(get(0, "/v1/responses/" + id1 + "/input_items?order=asc"));
  ASSERT_EQ(asc["data"].size(), 2u) << asc;
  EXPECT_EQ(asc["data"][0], list["data"][1]);
  const json before = Body(get(0, "/v1/responses/" + id1 + "/input_items?before=item_0"));
  ASSERT_EQ(before["data"].size(), 1u) << before;
  EXPECT_EQ(before["data"][0]["id"], "item_1");
  for (const auto& [query, param] :
       std::vector<std::pair<std::string, std::string>>{{"limit=0", "limit"},
                                                        {"limit=101", "limit"},
                                                        {"limit=x", "limit"},
                                                        {"order=up", "order"},
                                                        {"after=item_9", "after"},
                                                        {"before=%zz", "before"}}) {
    HttpReply bad = get(0, "/v1/responses/" + id1 + "/input_items?" + query);
    EXPECT_EQ(bad.status, 400) << query << ": " << bad.body;
    EXPECT_EQ(Body(bad)["error"]["param"], param) << query << ": " << bad.body;
  }

  // The chain's next response, created on the other replica, reads back alike; its input
  // items are its own input.
  HttpReply r2 = Post(1, "/v1/responses",
                      {{"input", "And then?"},
                       {"previous_response_id", id1},
                       {"max_output_tokens", 6},
                       {"temperature", 0}});
  ASSERT_EQ(r2.status, 200) << r2.body;
  const std::string id2 = Body(r2)["id"];
  HttpReply again2 = get(0, "/v1/responses/" + id2);
  ASSERT_EQ(again2.status, 200) << again2.body;
  EXPECT_EQ(Body(again2), Body(r2));
  EXPECT_EQ(Body(again2)["previous_response_id"], id1);
  const json items2 = Body(get(0, "/v1/responses/" + id2 + "/input_items"));
  ASSERT_EQ(items2["data"].size(), 1u) << items2;
  EXPECT_EQ(items2["data"][0]["content"][0]["text"], "And then?");

  // Streamed: the completed event's response is what reads back.
  json streamed = request;
  streamed["stream"] = true;
  HttpReply s = Post(1, "/v1/responses", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  json completed;
  for (const std::string& e : s.Events()) {
    const json event = json::parse(e);
    if (event["type"] == "response.incomplete" || event["type"] == "response.completed") {
      completed = event["response"];
    }
  }
  ASSERT_TRUE(completed.is_object()) << s.body;
  HttpReply again3 = get(0, "/v1/responses/" + completed["id"].get<std::string>());
  ASSERT_EQ(again3.status, 200) << again3.body;
  EXPECT_EQ(Body(again3), completed);

  // store: false keeps no record, yet the chain continues from it.
  json unstored = request;
  unstored["store"] = false;
  HttpReply r3 = Post(0, "/v1/responses", unstored);
  ASSERT_EQ(r3.status, 200) << r3.body;
  const std::string id3 = Body(r3)["id"];
  for (const std::string& path :
       {"/v1/responses/" + id3, "/v1/responses/" + id3 + "/input_items"}) {
    HttpReply gone = get(0, path);
    EXPECT_EQ(gone.status, 404) << path << ": " << gone.body;
    EXPECT_THAT(Body(gone)["error"]["message"].get<std::string>(), HasSubstr(id3));
  }
  EXPECT_EQ(Post(1, "/v1/responses",
                 {{"input", "More."}, {"previous_response_id", id3}, {"max_output_tokens", 2}})
                .status,
            200);
  unstored["store"] = "no";
  HttpReply bad_store = Post(0, "/v1/responses", unstored);
  EXPECT_EQ(bad_store.status, 400);
  EXPECT_EQ(Body(bad_store)["error"]["param"], "store");

  // A version chat wrote is no response; nor are ids of no version, or of no such form.
  json chat = kChat;
  chat["kvfold_session"] = "chat-not-a-response";
  ASSERT_EQ(Post(0, "/v1/chat/completions", chat).status, 200);
  for (const char* path :
       {"/v1/responses/resp_2_chat-not-a-response", "/v1/responses/resp_9_chat-not-a-response",
        "/v1/responses/resp_1_no-such-session", "/v1/responses/resp_x",
        "/v1/responses/chatcmpl-1/input_items"}) {
    HttpReply none = get(0, path);
    EXPECT_EQ(none.status, 404) << path << ": " << none.body;
  }
  EXPECT_EQ(get(0, "/v1/responses/resp_%zz").status, 400);
  EXPECT_EQ(HttpCall(port_[0], "GET", "/v1/responses/" + id1, "").status, 401);
  EXPECT_EQ(HttpCall(port_[0], "DELETE", "/v1/responses/" + id1, "", kAuth).status, 405);
  EXPECT_EQ(HttpCall(port_[0], "POST", "/v1/responses/" + id1, "{}", kAuth).status, 405);
  EXPECT_EQ(get(0, "/v1/responses/" + id1 + "/other").status, 404);
}

// A streamed response: OpenAI's typed events in order, numbered from 0; the deltas add up
// to the text the same request gives unstreamed; the id the first event names is the one
// the last carries, and it continues like any response id.
TEST_F(HttpApiTest, ResponsesStreamTypedEventsWithTheUnstreamedText) {
  json request = {{"input", "Once upon a time"}, {"max_output_tokens", 12}, {"temperature", 0}};
  HttpReply plain = Post(0, "/v1/responses", request);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const std::string text = Body(plain)["output"][0]["content"][0]["text"];
  ASSERT_FALSE(text.empty());

  // `previous`: empty for a new chain.
  auto stream = [&](int replica, const std::string& previous, const std::string& input) {
    json body = request;
    body["stream"] = true;
    body["input"] = input;
    if (!previous.empty()) body["previous_response_id"] = previous;
    HttpReply r = Post(replica, "/v1/responses", body);
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<std::pair<std::string, json>> events;  // (event line, data)
    size_t pos = 0;
    while ((pos = r.body.find("event: ", pos)) != std::string::npos) {
      const size_t nl = r.body.find('\n', pos);
      const size_t end = r.body.find("\n\n", nl);
      EXPECT_EQ(r.body.compare(nl + 1, 6, "data: "), 0) << r.body;
      events.emplace_back(r.body.substr(pos + 7, nl - pos - 7),
                          json::parse(r.body.substr(nl + 7, end - nl - 7)));
      pos = end;
    }
    EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
    return events;
  };
  const auto events = stream(1, "", "Once upon a time");
  ASSERT_GE(events.size(), 8u);
  const std::vector<std::string> opening = {"response.created", "response.output_item.added",
                                            "response.content_part.added"};
  const std::vector<std::string> closing = {"response.output_text.done",
                                            "response.content_part.done",
                                            "response.output_item.done", "response.incomplete"};
  std::string deltas;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& [type, data] = events[i];
    EXPECT_EQ(data["type"], type);
    EXPECT_EQ(data["sequence_number"], i);
    if (i < 3) {
      EXPECT_EQ(type, opening[i]);
    } else if (i >= events.size() - 4) {
      EXPECT_EQ(type, closing[i - (events.size() - 4)]);
    } else {
      EXPECT_EQ(type, "response.output_text.delta");
      deltas += data["delta"].get<std::string>();
    }
  }
  EXPECT_EQ(deltas, text);
  const json& created = events.front().second["response"];
  const json& done = events.back().second["response"];
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_EQ(done["status"], "incomplete");  // max_output_tokens ended it
  EXPECT_EQ(done["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], text);
  EXPECT_EQ(events[events.size() - 4].second["text"], text);
  EXPECT_EQ(done["usage"]["output_tokens"], 12);
  EXPECT_EQ(created["id"], done["id"]);
  EXPECT_EQ(events[1].second["item"]["id"], done["output"][0]["id"]);

  // Continued from the streamed id, streamed again on the other replica: the predicted id
  // holds again, and the chain answers as the same request unstreamed does.
  const std::string id = done["id"];
  const auto next = stream(0, id, "Then?");
  ASSERT_GE(next.size(), 8u);
  EXPECT_EQ(next.front().second["response"]["id"], next.back().second["response"]["id"]);
  EXPECT_EQ(next.back().second["response"]["previous_response_id"], id);
  HttpReply fork = Post(1, "/v1/responses",
                        {{"input", "Then?"},
                         {"previous_response_id", id},
                         {"max_output_tokens", 12},
                         {"temperature", 0}});
  ASSERT_EQ(fork.status, 200) << fork.body;
  EXPECT_EQ(Body(fork)["output"][0]["content"][0]["text"],
            next.back().second["response"]["output"][0]["content"][0]["text"]);
}

TEST_F(HttpApiTest, NamedSessionContinuesWithNewMessagesOnly) {
  json turn1 = kChat;
  turn1["kvfold_session"] = "http-named-1";
  HttpReply r1 = Post(0, "/v1/chat/completions", turn1);
  ASSERT_EQ(r1.status, 200) << r1.body;
  const uint64_t v1 = Body(r1)["usage"]["kvfold"]["version"];
  json turn2 = {{"messages", {{{"role", "user"}, {"content", "What next?"}}}},
                {"max_tokens", 6},
                {"temperature", 0}};
  HttpReply r2 =
      Post(1, "/v1/chat/completions", turn2, {kAuth[0], {"X-Kvfold-Session", "http-named-1"}});
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_GT(Body(r2)["usage"]["kvfold"]["version"].get<uint64_t>(), v1);
  EXPECT_EQ(Body(r2)["usage"]["kvfold"]["session_id"], "http-named-1");
  // Only the new message was sent: far fewer prompt tokens than the whole conversation.
  EXPECT_LT(Body(r2)["usage"]["prompt_tokens"].get<int>(),
            Body(r1)["usage"]["prompt_tokens"].get<int>() + 12);
}

TEST_F(HttpApiTest, DisconnectMidStreamCancelsAndCommitsNothing) {
  json long_turn = kChat;
  long_turn["kvfold_session"] = "http-disconnect";
  long_turn["max_tokens"] = 4000;
  long_turn["stream"] = true;
  // A first short turn gives the session a version to compare with.
  json first = kChat;
  first["kvfold_session"] = "http-disconnect";
  ASSERT_EQ(Post(0, "/v1/chat/completions", first).status, 200);
  v1::Session before;
  {
    grpc::ClientContext context;
    Authorize(&context);
    v1::GetSessionRequest request;
    request.set_session_id("http-disconnect");
    ASSERT_TRUE(cluster_->stub(0).GetSession(&context, request, &before).ok());
  }
  {
    HttpConnection c(port_[0]);
    ASSERT_TRUE(c.Send("POST", "/v1/chat/completions", long_turn.dump(), kAuth));
    EXPECT_THAT(c.ReadUntil("data: "), HasSubstr("200"));
    // A second turn on the session while this one runs: 409.
    HttpReply busy = Post(0, "/v1/chat/completions", first);
    EXPECT_EQ(busy.status, 409) << busy.body;
    c.Close();
  }
  // The cancelled turn is not committed; the session serves the next turn.
  HttpReply next;
  for (int i = 0; i < 50; ++i) {
    next = Post(0, "/v1/chat/completions", first);
    if (next.status != 409) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(Body(next)["usage"]["kvfold"]["version"].get<uint64_t>(), before.head_version() + 1);
}

}  // namespace
}  // namespace kvfold::testing
