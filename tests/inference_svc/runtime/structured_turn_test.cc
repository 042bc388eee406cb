// Structured output in a Runtime on the real stories260K model and tokenizer: a turn held
// to a JSON object or a schema writes a document an independent parser reads (the model
// alone writes stories), in every KV mode, greedy and sampled; bad formats are refused.
#include <algorithm>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/runtime/runtime.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/testing/shared_dir.h"

namespace kvfold::runtime {
namespace {

using json = nlohmann::json;

ResponseFormat JsonObject() {
  ResponseFormat f;
  f.kind = ResponseFormat::Kind::kJsonObject;
  return f;
}

ResponseFormat SchemaFormat(std::string schema) {
  ResponseFormat f;
  f.kind = ResponseFormat::Kind::kJsonSchema;
  f.json_schema = std::move(schema);
  return f;
}

const core::KvMode kModes[] = {core::KvMode::kFull, core::KvMode::kSliding, core::KvMode::kSink,
                               core::KvMode::kMemory};

class StructuredTurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveStories260K()) {
      GTEST_SKIP() << testing::MissingShared("models/stories260K");
    }
    auto m = model::LoadModel(testing::Stories260K() + "/stories260K.bin");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    backend_ = kernels::CreateCpuBackend({.num_threads = 2});
    engine::EngineOptions options;
    options.kv_pool_bytes = 32 << 20;
    auto e = engine::Engine::Create(model_, backend_.get(), options);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
    auto tok = Tokenizer::Load(testing::Stories260K() + "/tok512.bin");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    const char* src = std::getenv("KVFOLD_SOURCE_DIR");
    auto projector =
        memory::Projector::Load(std::string(src ? src : ".") + "/models/stories260K-projector");
    ASSERT_TRUE(projector.ok()) << projector.status();
    projector_ = std::move(*projector);
    Runtime::Deps deps;
    deps.engine = engine_.get();
    deps.tokenizer = tokenizer_.get();
    deps.projector = projector_.get();
    runtime_ = std::make_unique<Runtime>(deps, RuntimeOptions());
  }

  struct Answer {
    absl::Status status;
    std::string text;
    FinishReason finish = FinishReason::kNone;
  };

  Answer Run(TurnRequest request) {
    Answer a;
    auto turn = runtime_->StartTurn({"tenant", ""}, std::move(request));
    if (!turn.ok()) {
      a.status = turn.status();
      return a;
    }
    std::vector<int32_t> tokens;
    while (!(*turn)->Wait(absl::Milliseconds(20), &tokens)) {
    }
    auto usage = (*turn)->Finish();
    a.status = usage.status();
    if (usage.ok()) a.finish = usage->finish_reason;
    a.text = tokenizer_->Decode(tokens);
    return a;
  }

  static TurnRequest Request(core::KvMode mode, ResponseFormat format, float temperature = 0,
                             uint64_t seed = 0) {
    TurnRequest r;
    r.ephemeral.mode = mode;
    r.ephemeral.window_size = mode == core::KvMode::kMemory ? 104 : 64;  // the projector's W
    r.ephemeral.sink_tokens = mode == core::KvMode::kSink ? 4 : 0;
    r.prompt_text = "Once upon a time, a little girl";
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.sampling.max_new_tokens = 400;
    r.response_format = std::move(format);
    return r;
  }

  // A sampled answer held to JSON Schema `schema`, in mode kModes[seed % 4]; a turn that
  // fails or does not stop is reported here.
  Answer Sampled(const std::string& schema, uint64_t seed) {
    Answer a = Run(Request(kModes[seed % 4], SchemaFormat(schema), /*temperature=*/1.0f, seed));
    EXPECT_TRUE(a.status.ok()) << a.status;
    EXPECT_EQ(a.finish, FinishReason::kStop) << a.text;
    return a;
  }

  model::ModelFile model_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<memory::Projector> projector_;
  std::unique_ptr<Runtime> runtime_;
};

json Parse(const std::string& text) {
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// Where nlohmann's parser fails on `text` (its byte count, 1-based), 0 when it parses.
size_t ParseErrorAt(const std::string& text) {
  try {
    const json parsed = json::parse(text);
    return parsed.is_discarded() ? 1 : 0;
  } catch (const json::parse_error& e) {
    return e.byte;
  }
  return 0;
}

TEST_F(StructuredTurnTest, AJsonObjectInEveryMode) {
  const Answer free = Run(Request(core::KvMode::kFull, {}));
  ASSERT_TRUE(free.status.ok()) << free.status;
  EXPECT_TRUE(Parse(free.text).is_discarded()) << "the model alone writes JSON: " << free.text;
  // A story model writes long strings: a bias on the closing quote and brace (single-byte
  // tokens) ends the object within the token budget.
  std::vector<std::pair<int32_t, float>> closing;
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    if (tokenizer_->TokenBytes(id) == "\"") closing.emplace_back(id, 4.0f);
    if (tokenizer_->TokenBytes(id) == "}") closing.emplace_back(id, 8.0f);
  }
  ASSERT_GE(closing.size(), 2u);
  int whole = 0;
  for (core::KvMode mode : kModes) {
    SCOPED_TRACE(core::KvModeName(mode));
    TurnRequest request = Request(mode, JsonObject());
    request.sampling.logit_bias = closing;
    const Answer a = Run(std::move(request));
    ASSERT_TRUE(a.status.ok()) << a.status;
    ASSERT_EQ(a.text.substr(0, a.text.find_first_not_of(' ') + 1).back(), '{') << a.text;
    if (a.finish == FinishReason::kStop) {
      const json doc = Parse(a.text);
      EXPECT_TRUE(doc.is_object()) << a.text;
      ++whole;
    } else {
      // Cut by max_new_tokens: what there is must be the start of a document (the
      // parser's only complaint is the end of the input).
      EXPECT_EQ(a.finish, FinishReason::kLength);
      EXPECT_EQ(ParseErrorAt(a.text), a.text.size() + 1) << a.text;
    }
  }
  EXPECT_GE(whole, 2);
}

TEST_F(StructuredTurnTest, SampledDocumentsOfASchema) {
  const std::string schema = R"({"type":"object","properties":{
      "name":{"type":"string","minLength":1,"maxLength":12},
      "age":{"type":"integer"},
      "mood":{"enum":["happy","sad","sleepy"]},
      "friends":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},
      "required":["name","mood","friends"],"additionalProperties":false})";
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(seed);
    const core::KvMode mode = kModes[seed % 4];
    const Answer a = Run(Request(mode, SchemaFormat(schema),
                                 /*temperature=*/1.0f, seed));
    ASSERT_TRUE(a.status.ok()) << a.status;
    EXPECT_EQ(a.finish, FinishReason::kStop) << a.text;
    const json doc = Parse(a.text);
    ASSERT_TRUE(doc.is_object()) << a.text;
    ASSERT_TRUE(doc.contains("name") && doc["name"].is_string()) << a.text;
    const std::string name = doc["name"].get<std::string>();
    EXPECT_FALSE(name.empty());
    ASSERT_TRUE(doc.contains("mood")) << a.text;
    EXPECT_TRUE(doc["mood"] == "happy" || doc["mood"] == "sad" || doc["mood"] == "sleepy");
    ASSERT_TRUE(doc.contains("friends") && doc["friends"].is_array()) << a.text;
    EXPECT_LE(doc["friends"].size(), 3u);
    if (doc.contains("age")) {
      EXPECT_TRUE(doc["age"].is_number_integer()) << a.text;
    }
    for (const auto& [key, value] : doc.items()) {
      EXPECT_TRUE(key == "name" || key == "age" || key == "mood" || key == "friends") << key;
    }
  }
}

// Patterns, numeric bounds and tuples hold sampled answers of the real model in every mode.
TEST_F(StructuredTurnTest, PatternsBoundsAndTuples) {
  const std::string schema = R"({"type":"object","properties":{
      "code":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},
      "score":{"type":"integer","minimum":1,"maximum":5},
      "ratio":{"type":"number","minimum":0,"exclusiveMaximum":1},
      "pair":{"type":"array","prefixItems":[{"type":"boolean"},
                                             {"type":"string","pattern":"^[a-z]{1,4}$"}],
              "items":false,"minItems":2}},
      "required":["code","score","ratio","pair"],"additionalProperties":false})";
  const std::regex code("^[A-Z]{2}-[0-9]{3}$"), word("^[a-z]{1,4}$");
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(seed);
    const Answer a = Sampled(schema, seed);
    const json doc = Parse(a.text);
    ASSERT_TRUE(doc.is_object()) << a.text;
    EXPECT_TRUE(std::regex_search(doc.value("code", ""), code)) << a.text;
    ASSERT_TRUE(doc["score"].is_number_integer()) << a.text;
    EXPECT_TRUE(doc["score"].get<int>() >= 1 && doc["score"].get<int>() <= 5) << a.text;
    ASSERT_TRUE(doc["ratio"].is_number()) << a.text;
    EXPECT_TRUE(doc["ratio"].get<double>() >= 0 && doc["ratio"].get<double>() < 1) << a.text;
    ASSERT_TRUE(doc["pair"].is_array() && doc["pair"].size() == 2) << a.text;
    EXPECT_TRUE(doc["pair"][0].is_boolean()) << a.text;
    EXPECT_TRUE(std::regex_search(doc["pair"][1].get<std::string>(), word)) << a.text;
  }
}

// multipleOf, the formats with a shape, uniqueItems (of listed values, strings, integers), a
// map's listed keys and a discriminated oneOf hold what the real model writes.
TEST_F(StructuredTurnTest, MultiplesFormatsSetsMapsAndUnions) {
  const std::string schema = R"({"type":"object","properties":{
      "step":{"type":"integer","multipleOf":25,"minimum":0,"maximum":200},
      "host":{"type":"string","format":"hostname","maxLength":12},
      "span":{"type":"string","format":"duration","maxLength":8},
      "ip":{"type":"string","format":"ipv6"},
      "tags":{"type":"array","items":{"enum":["red","green","blue"]},"uniqueItems":true},
      "words":{"type":"array","items":{"type":"string","maxLength":2},"uniqueItems":true,
               "minItems":3,"maxItems":5},
      "ids":{"type":"array","items":{"type":"integer"},"uniqueItems":true,"minItems":2,
             "maxItems":4},
      "ranks":{"type":"array","items":{"type":"integer","minimum":1,"maximum":4},
               "uniqueItems":true,"minItems":4},
      "marks":{"propertyNames":{"enum":["x","y"]},"minProperties":1,
               "additionalProperties":{"type":"integer","minimum":0,"maximum":9}},
      "pet":{"oneOf":[
          {"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer"}},
           "required":["kind","lives"],"additionalProperties":false},
          {"type":"object","properties":{"kind":{"const":"dog"}},"required":["kind"],
           "additionalProperties":false}],
        "discriminator":{"propertyName":"kind"}}},
      "required":["step","host","span","ip","tags","words","ids","ranks","marks","pet"],
      "additionalProperties":false})";
  const std::regex host(
      "^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$");
  const std::regex span("^P(\\d+[YMWD]|T\\d+[HMS])");
  const std::regex ip("^[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){7}$");
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(seed);
    const Answer a = Sampled(schema, seed);
    const json doc = Parse(a.text);
    ASSERT_TRUE(doc.is_object()) << a.text;
    ASSERT_TRUE(doc["step"].is_number_integer()) << a.text;
    const int step = doc["step"].get<int>();
    EXPECT_TRUE(step >= 0 && step <= 200 && step % 25 == 0) << a.text;
    const std::string h = doc.value("host", ""), d = doc.value("span", "");
    EXPECT_TRUE(std::regex_search(h, host) && h.size() <= 12) << a.text;
    EXPECT_TRUE(std::regex_search(d, span) && d.size() <= 8) << a.text;
    EXPECT_TRUE(std::regex_search(doc.value("ip", ""), ip)) << a.text;
    ASSERT_TRUE(doc["tags"].is_array()) << a.text;
    const std::set<json> tags(doc["tags"].begin(), doc["tags"].end());
    EXPECT_EQ(tags.size(), doc["tags"].size()) << a.text;
    for (const json& t : tags) {
      EXPECT_TRUE(t == "red" || t == "green" || t == "blue") << a.text;
    }
    ASSERT_TRUE(doc["words"].is_array()) << a.text;
    const std::set<json> words(doc["words"].begin(), doc["words"].end());
    EXPECT_EQ(words.size(), doc["words"].size()) << a.text;  // a set of strings
    EXPECT_TRUE(words.size() >= 3 && words.size() <= 5) << a.text;
    ASSERT_TRUE(doc["ids"].is_array()) << a.text;
    std::set<int64_t> ids;
    for (const json& id : doc["ids"]) ids.insert(id.get<int64_t>());
    EXPECT_EQ(ids.size(), doc["ids"].size()) << a.text;  // a set of integers
    // Four distinct values of four: the last one is the one left.
    std::set<int64_t> ranks;
    for (const json& r : doc["ranks"]) ranks.insert(r.get<int64_t>());
    EXPECT_EQ(ranks, (std::set<int64_t>{1, 2, 3, 4})) << a.text;
    EXPECT_EQ(doc["ranks"].size(), 4u) << a.text;
    // Each key of the map once (a parser would keep the last of a repeated one).
    std::multiset<std::string> keys;
    [[maybe_unused]] const json read =
        json::parse(a.text, [&](int depth, json::parse_event_t event, json& key) {
          if (depth == 2 && event == json::parse_event_t::key) keys.insert(key.get<std::string>());
          return true;
        });
    ASSERT_TRUE(doc["marks"].is_object()) << a.text;
    EXPECT_GE(doc["marks"].size(), 1u) << a.text;
    for (const auto& [k, v] : doc["marks"].items()) {
      EXPECT_TRUE(k == "x" || k == "y") << a.text;
      EXPECT_EQ(keys.count(k), 1u) << a.text;
      EXPECT_TRUE(v.is_number_integer() && v.get<int>() >= 0 && v.get<int>() <= 9) << a.text;
    }
    const json& pet = doc["pet"];
    EXPECT_TRUE((pet == json{{"kind", "dog"}}) ||
                (pet.size() == 2 && pet["kind"] == "cat" && pet["lives"].is_number_integer()))
        << a.text;
  }
}

// Patterns with lookaheads hold what the real model writes: Pydantic's for a Decimal (bare,
// and with max_digits / decimal_places) and a code that must hold a digit and a letter;
// and a `uri` (its shape is a pattern too).
// (The bare one is capped in length here: the tiny model goes on writing digits. The other
// is Pydantic's as written, which takes any text after its first alternative's digits.)
TEST_F(StructuredTurnTest, DecimalsAndOtherLookaheads) {
  const std::string decimal = "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$";
  const std::string money =
      "^(?!^[-+.]*$)[+-]?0*(?:\\d{0,5}|(?=[\\d.]{1,8}0*$)\\d{0,5}\\.\\d{0,2}0*$)";
  const std::string code = "^(?=.*\\d)(?=.*[a-z])(?!.*\\s)[a-z0-9]{2,6}$";
  const json schema = {
      {"type", "object"},
      {"properties",
       {{"total",
         {{"anyOf",
           {{{"type", "number"}}, {{"type", "string"}, {"pattern", decimal}, {"maxLength", 12}}}}}},
        {"price", {{"type", "string"}, {"pattern", money}, {"maxLength", 10}}},
        {"code", {{"type", "string"}, {"pattern", code}}},
        {"site", {{"type", "string"}, {"format", "uri"}, {"maxLength", 40}}}}},
      {"required", {"total", "price", "code", "site"}},
      {"additionalProperties", false}};
  const std::regex decimal_re(decimal), money_re(money), code_re(code);
  const std::regex site_re("^https?://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?([/?#]|$)");
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(seed);
    const Answer a = Sampled(schema.dump(), seed);
    const json doc = Parse(a.text);
    ASSERT_TRUE(doc.is_object()) << a.text;
    EXPECT_TRUE(doc["total"].is_number() ||
                (doc["total"].is_string() &&
                 std::regex_search(doc["total"].get<std::string>(), decimal_re)))
        << a.text;
    ASSERT_TRUE(doc["price"].is_string() && doc["code"].is_string()) << a.text;
    EXPECT_TRUE(std::regex_search(doc["price"].get<std::string>(), money_re)) << a.text;
    EXPECT_TRUE(std::regex_search(doc["code"].get<std::string>(), code_re)) << a.text;
    ASSERT_TRUE(doc["site"].is_string()) << a.text;
    EXPECT_TRUE(std::regex_search(doc["site"].get<std::string>(), site_re)) << a.text;
  }
}

// A choice answers exactly one of its texts, whatever the mode and the draw.
// (A list of more than 64 choices is matched by runs of its sorted texts.)
TEST_F(StructuredTurnTest, AChoiceIsOneOfItsTexts) {
  std::vector<std::string> long_list = {"yes", "no", "yes, and more"};
  for (int i = 0; i < 300; ++i) long_list.push_back(absl::StrCat("the ", i, "th"));
  for (const std::vector<std::string>& choices :
       {std::vector<std::string>{"yes", "no", "yes, and more", "maybe"}, long_list}) {
    std::set<std::string> seen;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      ResponseFormat f;
      f.kind = ResponseFormat::Kind::kChoice;
      f.choices = choices;
      const Answer a = Run(Request(kModes[seed % 4], f, /*temperature=*/1.0f, seed));
      ASSERT_TRUE(a.status.ok()) << a.status;
      EXPECT_EQ(a.finish, FinishReason::kStop);
      EXPECT_NE(std::find(choices.begin(), choices.end(), a.text), choices.end()) << a.text;
      seen.insert(a.text);
    }
    EXPECT_GT(seen.size(), 1u);  // the draw decides, not the grammar
  }
}

TEST_F(StructuredTurnTest, FormatsThatCannotBeHeldAreRefused) {
  TurnRequest bad =
      Request(core::KvMode::kFull, SchemaFormat(R"({"type":"string","pattern":"a\\b"})"));
  auto turn = runtime_->StartTurn({"tenant", ""}, std::move(bad));
  ASSERT_FALSE(turn.ok());
  EXPECT_EQ(turn.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(turn.status().message().find("word boundary"), std::string::npos) << turn.status();

  TurnRequest only = Request(core::KvMode::kFull, JsonObject());
  only.prompt_only = true;
  EXPECT_EQ(runtime_->StartTurn({"tenant", ""}, std::move(only)).status().code(),
            absl::StatusCode::kInvalidArgument);

  Runtime::Deps deps;
  deps.engine = engine_.get();
  Runtime without_tokenizer(deps, RuntimeOptions());
  TurnRequest ids = Request(core::KvMode::kFull, JsonObject());
  ids.prompt_text.clear();
  ids.prompt_ids = {1, 2, 3};
  EXPECT_EQ(without_tokenizer.StartTurn({"tenant", ""}, std::move(ids)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvfold::runtime
