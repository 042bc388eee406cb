// Structured output through real replicas: chat, completions and responses held to a JSON
// Schema (or any JSON object) write documents nlohmann parses and the schema admits, in
// several choices, streamed, and on a stored session that goes on as free text; gRPC's
// GenerateRequest.response_format does the same; a schema outside the subset is a 400 /
// INVALID_ARGUMENT naming the keyword.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/prometheus_text.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {
namespace {

using json = nlohmann::json;
// Request bodies keep their keys' order: the schema's properties are written in it.
using ojson = nlohmann::ordered_json;
using ::testing::HasSubstr;

const ojson kPet = ojson::parse(R"({"type":"object","properties":{
    "name":{"type":"string","minLength":1,"maxLength":10},
    "kind":{"enum":["cat","dog","bird"]},
    "age":{"type":"integer"},
    "toys":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":2}},
    "required":["name","kind"],"additionalProperties":false})");

// Whether `text` is a document of kPet.
void ExpectPet(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(doc.is_object()) << text;
  ASSERT_TRUE(doc.contains("name") && doc["name"].is_string()) << text;
  EXPECT_GE(doc["name"].get<std::string>().size(), 1u) << text;
  ASSERT_TRUE(doc.contains("kind")) << text;
  EXPECT_TRUE(doc["kind"] == "cat" || doc["kind"] == "dog" || doc["kind"] == "bird") << text;
  if (doc.contains("age")) {
    EXPECT_TRUE(doc["age"].is_number_integer()) << text;
  }
  if (doc.contains("toys")) {
    EXPECT_TRUE(doc["toys"].is_array() && doc["toys"].size() <= 2) << text;
  }
  for (const auto& [key, value] : doc.items()) {
    EXPECT_TRUE(key == "name" || key == "kind" || key == "age" || key == "toys") << text;
  }
  // In the schema's order (not the alphabetical one).
  EXPECT_LT(text.find("\"name\""), text.find("\"kind\"")) << text;
}

ojson PetFormat() {
  return {{"type", "json_schema"}, {"json_schema", {{"name", "pet"}, {"schema", kPet}}}};
}

ojson Chat() { return ojson::parse(kChat.dump()); }

TEST_F(HttpApiTest, ChatChoicesAreDocumentsOfTheSchema) {
  ojson chat = Chat();
  chat["max_tokens"] = 200;
  chat["temperature"] = 1.0;
  chat["seed"] = 3;
  chat["n"] = 3;
  chat["response_format"] = PetFormat();
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  ASSERT_EQ(body["choices"].size(), 3u);
  for (const json& choice : body["choices"]) {
    EXPECT_EQ(choice["finish_reason"], "stop");
    ExpectPet(choice["message"]["content"].get<std::string>());
  }

  // Streamed: the deltas join into a document.
  chat["n"] = 1;
  chat["stream"] = true;
  HttpReply s = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string joined;
  for (const std::string& e : s.Events()) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    if (!chunk["choices"].empty()) joined += chunk["choices"][0]["delta"].value("content", "");
  }
  ExpectPet(joined);
}

TEST_F(HttpApiTest, AStoredSessionAnswersInJsonThenGoesOnFreely) {
  ojson chat = Chat();
  chat["kvfold_session"] = "http-structured";
  chat["max_tokens"] = 200;
  chat["response_format"] = PetFormat();
  HttpReply first = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(first.status, 200) << first.body;
  ExpectPet(Body(first)["choices"][0]["message"]["content"].get<std::string>());
  // The other replica continues the session as free text.
  chat.erase("response_format");
  chat["max_tokens"] = 8;
  chat["messages"] = {{{"role", "user"}, {"content", "And then?"}}};
  HttpReply second = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(Body(second)["usage"]["completion_tokens"], 8);
}

TEST_F(HttpApiTest, CompletionsAndResponsesTakeTheFormatToo) {
  const ojson completion = {{"prompt", "Once upon a time"},
                            {"max_tokens", 200},
                            {"temperature", 0},
                            {"response_format", PetFormat()}};
  HttpReply c = HttpCall(port_[0], "POST", "/v1/completions", completion.dump(), kAuth);
  ASSERT_EQ(c.status, 200) << c.body;
  ExpectPet(Body(c)["choices"][0]["text"].get<std::string>());

  const ojson response = {
      {"input", "Tell me about a pet."},
      {"max_output_tokens", 200},
      {"temperature", 0},
      {"text", {{"format", {{"type", "json_schema"}, {"name", "pet"}, {"schema", kPet}}}}}};
  HttpReply r = HttpCall(port_[1], "POST", "/v1/responses", response.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  ExpectPet(Body(r)["output"][0]["content"][0]["text"].get<std::string>());
}

// vLLM's guided decoding params through a replica: guided_choice answers one of its texts
// (chat and completions), guided_json a document of its schema.
TEST_F(HttpApiTest, VllmGuidedChoiceAndJson) {
  const std::vector<std::string> choices = {"a cat", "a dog", "a bird"};
  ojson chat = Chat();
  chat["guided_choice"] = choices;
  chat["temperature"] = 1.0;
  chat["seed"] = 2;
  chat["n"] = 4;
  auto structured_tokens = [&] {
    return ParsePrometheusText(HttpCall(port_[0], "GET", "/metrics").body)
        .Value("kvfold_structured_tokens_total", {});
  };
  const double before = structured_tokens();
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  // Every generated token was picked under the mask.
  EXPECT_EQ(structured_tokens() - before, Body(r)["usage"]["completion_tokens"].get<double>());
  // The body outlives the loop (a temporary's member would not).
  const json answers = Body(r)["choices"];
  for (const json& choice : answers) {
    const std::string text = choice["message"]["content"].get<std::string>();
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
    EXPECT_EQ(choice["finish_reason"], "stop");
  }
  const ojson completion = {{"prompt", "Once upon a time"},
                            {"max_tokens", 200},
                            {"temperature", 0},
                            {"guided_json", kPet}};
  HttpReply c = HttpCall(port_[1], "POST", "/v1/completions", completion.dump(), kAuth);
  ASSERT_EQ(c.status, 200) << c.body;
  ExpectPet(Body(c)["choices"][0]["text"].get<std::string>());
}

TEST_F(HttpApiTest, SchemasOutsideTheSubsetAreRefused) {
  json chat = kChat;
  chat["response_format"] = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "x"}, {"schema", {{"type", "array"}, {"contains", {{"type", "integer"}}}}}}}};
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("'contains' is not supported"));
  chat["response_format"] = {{"type", "xml"}};
  r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Body(r)["error"]["param"], "response_format");
}

// `strict: false`: what the subset cannot hold is read past, named in a header, and the
// rest holds (chat, streamed chat, responses); strict true or absent: refused.
TEST_F(HttpApiTest, LenientSchemasHoldTheRestAndNameWhatTheySkip) {
  const ojson digits = ojson::parse(R"({"type":"array","items":{"type":"integer","minimum":0,
      "maximum":9},"minItems":1,"maxItems":3,"contains":{"const":3}})");
  auto expect_digits = [](const std::string& text) {
    const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(doc.is_array() && !doc.empty() && doc.size() <= 3) << "[" << text << "]";
    for (const json& d : doc) {
      EXPECT_TRUE(d.is_number_integer() && d.get<int>() >= 0 && d.get<int>() <= 9) << text;
    }
  };
  const std::string skipped = R"(["contains at '/'"])";
  ojson chat = Chat();
  chat["max_tokens"] = 40;
  chat["response_format"] = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "digits"}, {"schema", digits}, {"strict", false}}}};
  HttpReply r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("X-Kvfold-Schema-Skipped"), skipped);
  {
    SCOPED_TRACE(r.body);
    expect_digits(Body(r)["choices"][0]["message"]["content"].get<std::string>());
  }
  chat["stream"] = true;
  r = HttpCall(port_[1], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("X-Kvfold-Schema-Skipped"), skipped);
  std::string streamed;
  for (const std::string& e : r.Events()) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    if (!chunk["choices"].empty()) streamed += chunk["choices"][0]["delta"].value("content", "");
  }
  {
    SCOPED_TRACE(r.body);
    expect_digits(streamed);
  }
  chat.erase("stream");
  chat["response_format"]["json_schema"]["strict"] = true;
  r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("'contains' is not supported"));
  EXPECT_EQ(r.Header("X-Kvfold-Schema-Skipped"), "");
  chat["response_format"]["json_schema"]["strict"] = "no";
  r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("strict' must be a boolean"));
  // A schema held whole sends no header.
  chat["response_format"]["json_schema"]["strict"] = false;
  chat["response_format"]["json_schema"]["schema"] = kPet;
  r = HttpCall(port_[0], "POST", "/v1/chat/completions", chat.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("X-Kvfold-Schema-Skipped"), "");
  ojson response = {
      {"model", ""},
      {"input", "Tell me some digits."},
      {"max_output_tokens", 40},
      {"text",
       {{"format",
         {{"type", "json_schema"}, {"name", "digits"}, {"schema", digits}, {"strict", false}}}}}};
  r = HttpCall(port_[1], "POST", "/v1/responses", response.dump(), kAuth);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Header("X-Kvfold-Schema-Skipped"), skipped);
  std::string text;
  const json answer = Body(r);
  for (const json& item : answer["output"]) {
    for (const json& part : item.value("content", json::array())) text += part.value("text", "");
  }
  SCOPED_TRACE(r.body);
  expect_digits(text);
}

TEST_F(HttpApiTest, GrpcGenerateTakesAResponseFormat) {
  ASSERT_TRUE(CreateGrpcSession(0, "grpc-structured").ok());
  v1::GenerateFinal last_final;
  auto generate = [&](v1::ResponseFormat format, std::string* text) {
    grpc::ClientContext context;
    Authorize(&context);
    v1::GenerateRequest request;
    request.set_session_id("grpc-structured");
    request.set_prompt("Once upon a time");
    request.mutable_sampling()->set_max_new_tokens(200);
    request.mutable_sampling()->set_temperature(0);
    *request.mutable_response_format() = std::move(format);
    auto reader = cluster_->stub(0).Generate(&context, request);
    v1::GenerateResponse response;
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    while (reader->Read(&response)) {
      *text += response.delta().text();
      if (response.has_final()) {
        finish = response.final().finish_reason();
        last_final = response.final();
      }
    }
    const grpc::Status status = reader->Finish();
    if (status.ok()) {
      EXPECT_EQ(finish, v1::FINISH_REASON_STOP);
    }
    return status;
  };
  v1::ResponseFormat format;
  format.set_type(v1::ResponseFormat::TYPE_JSON_SCHEMA);
  format.set_json_schema(kPet.dump());
  std::string text;
  ASSERT_TRUE(generate(format, &text).ok());
  ExpectPet(text);

  v1::ResponseFormat choice;
  choice.set_type(v1::ResponseFormat::TYPE_CHOICE);
  choice.add_choices("red");
  choice.add_choices("green");
  text.clear();
  ASSERT_TRUE(generate(choice, &text).ok());
  EXPECT_TRUE(text == "red" || text == "green") << text;

  // Numeric bounds hold the answer to [3, 9].
  format.set_json_schema(R"({"type":"integer","minimum":3,"exclusiveMaximum":10})");
  text.clear();
  ASSERT_TRUE(generate(format, &text).ok());
  const json value = json::parse(text, nullptr, false);
  ASSERT_TRUE(value.is_number_integer()) << text;
  EXPECT_GE(value.get<int>(), 3);
  EXPECT_LE(value.get<int>(), 9);

  format.set_json_schema(R"({"type":"array","contains":{"type":"integer"}})");
  text.clear();
  const grpc::Status bad = generate(format, &text);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("'contains' is not supported"));

  // Lenient: held but for `contains`, which GenerateFinal names.
  format.set_json_schema(
      R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"maxItems":3,)"
      R"("contains":{"const":3}})");
  format.set_lenient(true);
  text.clear();
  ASSERT_TRUE(generate(format, &text).ok());
  EXPECT_EQ(last_final.schema_skipped_size(), 1);
  if (last_final.schema_skipped_size() == 1) {
    EXPECT_EQ(last_final.schema_skipped(0), "contains at '/'");
  }
  const json digits = json::parse(text, nullptr, false);
  ASSERT_TRUE(digits.is_array() && digits.size() <= 3) << text;
}

}  // namespace
}  // namespace kvfold::testing
