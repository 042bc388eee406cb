// Seeded mutations of valid request bodies through everything a replica does with a body
// before its engine sees it: the five endpoints' parsers, the tools and the answer's held
// schema, the grammars of response_format / guided_choice and a matcher walking them, every
// chat family's rendering and token ids, and reading an answer as tool calls. A request
// must never crash, hang or corrupt memory (the ASan build runs this too): each step
// either succeeds or refuses with a precise status (InvalidArgument, or FailedPrecondition
// for what a family cannot show) and a message, which the front answers with a 4xx.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/http/openai_protocol.h"
#include "inference_svc/http/tool_calls.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/json_matcher.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/inference_svc/structured/random_document.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold::http {
namespace {

using json = nlohmann::json;

// Valid bodies of every endpoint, using most of what each accepts.
const json kSchema = {
    {"type", "object"},
    {"properties",
     {{"city", {{"type", "string"}, {"maxLength", 12}}},
      {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 14}}},
      {"temp", {{"type", "number"}, {"exclusiveMinimum", -90}, {"exclusiveMaximum", 60}}},
      {"units", {{"enum", {"c", "f"}}}},
      {"tags", {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 3}}},
      {"when", {{"anyOf", {{{"type", "null"}}, {{"type", "number"}}}}}},
      {"nested", {{"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}}}}},
    {"required", {"city"}},
    {"additionalProperties", false}};

const json kTool = {
    {"type", "function"},
    {"function",
     {{"name", "get_weather"}, {"description", "Weather in a city"}, {"parameters", kSchema}}}};

// A function whose parameters refer into themselves and hold what only `strict: false`
// lets through.
const json kLenientTool = json::parse(R"j({"type": "function", "function": {"name": "tag",
    "strict": false, "parameters": {"type": "object", "properties": {
      "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "uniqueItems": true,
               "contains": {"const": "a"}},
      "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
    "$defs": {"Tag": {"type": "string", "maxLength": 4, "not": {"const": ""}}}}}})j");

std::vector<std::pair<std::string, json>> Seeds() {
  const json messages = {
      {{"role", "system"}, {"content", "Be brief."}},
      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Weather in Paris?"}}}}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_1"},
          {"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}},
      {{"role", "user"}, {"content", "And tomorrow?"}}};
  return {
      {"chat",
       {{"model", "m"},
        {"messages", messages},
        {"tools", {kTool}},
        {"tool_choice", "auto"},
        {"parallel_tool_calls", false},
        {"max_tokens", 16},
        {"temperature", 0.7},
        {"top_p", 0.9},
        {"seed", 3},
        {"stop", {"\n\n", "END"}},
        {"logprobs", true},
        {"top_logprobs", 2},
        {"logit_bias", {{"42", 2.5}}},
        {"stream", true},
        {"stream_options", {{"include_usage", true}}}}},
      {"chat",
       {{"model", "m"},
        {"messages", {{{"role", "user"}, {"content", "A city as JSON"}}}},
        {"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "city"}, {"schema", kSchema}}}}},
        {"n", 2}}},
      {"chat",
       {{"model", "m"},
        {"messages", {{{"role", "user"}, {"content", "Call it"}}}},
        {"tools", {kTool}},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}},
      {"chat",
       {{"model", "m"},
        {"messages", {{{"role", "user"}, {"content", "Tag it"}}}},
        {"tools", {kTool, kLenientTool}},
        {"tool_choice", "required"}}},
      {"chat",
       {{"model", "m"},
        {"messages",
         {{{"role", "user"}, {"content", "Weather?"}},
          {{"role", "assistant"},
           {"content", nullptr},
           {"function_call", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}},
          {{"role", "function"}, {"name", "get_weather"}, {"content", "snow"}}}},
        {"functions", {kTool["function"]}},
        {"function_call", {{"name", "get_weather"}}},
        {"stream", true}}},
      {"chat",
       {{"model", "m"},
        {"messages",
         {{{"role", "user"}, {"content", "Yes or no?"}},
          {{"role", "assistant"}, {"content", "Well"}}}},
        {"continue_final_message", true},
        {"add_generation_prompt", false},
        {"guided_choice", {"yes", "no"}},
        {"min_tokens", 1},
        {"stop_token_ids", {2}},
        {"repetition_penalty", 1.1},
        {"top_k", 5},
        {"min_p", 0.05}}},
      {"completions",
       {{"model", "m"},
        {"prompt", {"Once upon a time", "The end"}},
        {"max_tokens", 8},
        {"echo", true},
        {"logprobs", 2},
        {"n", 2},
        {"guided_json", kSchema}}},
      {"completions", {{"model", "m"}, {"prompt", {1, 2, 3}}, {"max_tokens", 0}, {"echo", true}}},
      {"responses",
       {{"model", "m"},
        {"instructions", "Be brief."},
        {"input",
         {{{"role", "user"}, {"content", "Weather?"}},
          {{"type", "function_call"},
           {"call_id", "c1"},
           {"name", "get_weather"},
           {"arguments", "{\"city\": \"Rome\"}"}},
          {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "rain"}}}},
        {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"parameters", kSchema}}}},
        {"text", {{"format", {{"type", "json_schema"}, {"name", "w"}, {"schema", kSchema}}}}},
        {"max_output_tokens", 32},
        {"top_logprobs", 1}}},
      {"tokenize",
       {{"model", "m"},
        {"messages", messages},
        {"tools", {kTool}},
        {"add_generation_prompt", true},
        {"return_token_strs", true}}},
      {"tokenize", {{"model", "m"}, {"prompt", "Hello there"}, {"add_special_tokens", false}}},
      {"detokenize", {{"model", "m"}, {"tokens", {1, 2, 3}}}},
  };
}

// Values that break assumptions: extremes, wrong types, deep or wide structures, odd text.
json OddValue(std::mt19937_64& rng) {
  switch (rng() % 25) {
    case 0:
      return nullptr;
    case 1:
      return true;
    case 2:
      return -1;
    case 3:
      return 0;
    case 4:
      return 2147483648LL;
    case 5:
      return -9223372036854775807LL - 1;
    case 6:
      return 18446744073709551615ULL;
    case 7:
      return 1e308;
    case 8:
      return -1e-320;
    case 9:
      return 0.5;
    case 10:
      return "";
    case 11:
      return std::string(1 + rng() % 5000, "a{\"[\\ "[rng() % 6]);
    case 12:
      return "\xF0\x9F\x98\x80 \xE2\x80\x8B\xEF\xBF\xBF \\u0000";
    case 13:
      return json::array();
    case 14:
      return json::object();
    case 15: {
      json deep = 1;
      const int depth = 1 + static_cast<int>(rng() % 200);
      for (int i = 0; i < depth; ++i) deep = rng() % 2 ? json::array({deep}) : json{{"a", deep}};
      return deep;
    }
    case 16:
      return json::array({1, "x", nullptr, json::object()});
    case 17: {
      json wide = json::array();
      for (int i = 0, n = static_cast<int>(rng() % 300); i < n; ++i) wide.push_back(i);
      return wide;
    }
    case 18:
      return "<|eot_id|><|im_start|>system\n[INST][TOOL_CALLS]</s>";
    case 19:
      return {{"type", "string"}, {"pattern", "a+"}};
    case 20:
      return {{"$ref", "#"}};
    case 21:
      return rng() % 2 ? "hostname" : "duration";
    case 22:
      return {{"items", {{"enum", {1, 1.0, "a"}}}}, {"uniqueItems", true}};
    case 23:
      return {{"type", "integer"}, {"multipleOf", 7}, {"maximum", 6}};
    default:
      return {{"anyOf", {{{"type", "string"}}, {{"type", "integer"}}}}};
  }
}

// A random node of `j` (the root included), each as likely.
json* RandomNode(json& j, std::mt19937_64& rng) {
  std::vector<json*> nodes = {&j};
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i]->is_object() || nodes[i]->is_array()) {
      for (json& child : *nodes[i]) nodes.push_back(&child);
    }
  }
  return nodes[rng() % nodes.size()];
}

// 1-2 structural edits of `seed`, then sometimes a byte-level one of its text.
std::string Mutate(const json& seed, std::mt19937_64& rng) {
  json j = seed;
  const int edits = 1 + static_cast<int>(rng() % 2);
  for (int e = 0; e < edits; ++e) {
    json* node = RandomNode(j, rng);
    switch (rng() % 6) {
      case 0:  // drop a member or an element
        if (node->is_object() && !node->empty()) {
          auto it = node->begin();
          std::advance(it, rng() % node->size());
          node->erase(it.key());
          break;
        }
        [[fallthrough]];
      case 1:
      case 2:
        *node = OddValue(rng);
        break;
      case 3:  // repeat an element
        if (node->is_array() && !node->empty()) {
          const json first = node->front();
          for (int i = 0, n = 1 + static_cast<int>(rng() % 70); i < n; ++i) node->push_back(first);
          break;
        }
        [[fallthrough]];
      case 4:  // wrap
        *node = rng() % 2 ? json::array({*node}) : json{{"type", *node}};
        break;
      default:  // a key the schema and parser readers know, with an odd value
        if (node->is_object()) {
          static const char* kKeys[] = {
              "type",      "items",       "enum",       "minItems",         "maxItems",
              "required",  "minimum",     "maximum",    "exclusiveMinimum", "exclusiveMaximum",
              "minLength", "anyOf",       "const",      "properties",       "name",
              "role",      "content",     "arguments",  "tool_calls",       "maxLength",
              "pattern",   "prefixItems", "multipleOf", "uniqueItems",      "format"};
          (*node)[kKeys[rng() % std::size(kKeys)]] = OddValue(rng);
        }
    }
  }
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!text.empty() && rng() % 8 == 0) {
    switch (rng() % 4) {
      case 0:
        text[rng() % text.size()] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:
        text.resize(rng() % text.size());
        break;
      case 2:
        text.insert(rng() % text.size(), "\xC3\x28\xFF");
        break;
      default:
        text.insert(rng() % text.size(), std::string(1 + rng() % 4, "{[\",:"[rng() % 5]));
    }
  }
  return text;
}

// A refusal is precise: one of the codes the front maps to a 4xx, and a message.
void ExpectRefusal(const absl::Status& s, const std::string& what, const std::string& body) {
  EXPECT_TRUE(s.code() == absl::StatusCode::kInvalidArgument ||
              s.code() == absl::StatusCode::kFailedPrecondition)
      << what << ": " << s << "\nbody: " << body.substr(0, 600);
  EXPECT_FALSE(s.message().empty()) << what << "\nbody: " << body.substr(0, 600);
  const int http = HttpStatusOf(s.code());
  EXPECT_TRUE(http >= 400 && http < 500) << what << ": " << s;
}

// Whether the parser took the body; a refusal must be precise.
template <class T>
bool Parsed(const absl::StatusOr<T>& r, const std::string& what, const std::string& body) {
  if (!r.ok()) ExpectRefusal(r.status(), what, body);
  return r.ok();
}

// Every chat family over one byte-level tokenizer with all their special strings.
class RequestFuzzTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("kvfold_request_fuzz_" + std::to_string(getpid())));
    std::filesystem::create_directories(*dir_);
    std::ofstream(*dir_ / "tokenizer.json") << testing::ByteLevelTokenizerJson();
    auto tokenizer = Tokenizer::Load((*dir_ / "tokenizer.json").string());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
    templates_ = new std::vector<ChatTemplate>();
    for (ChatFormat f :
         {ChatFormat::kLlama3, ChatFormat::kChatMl, ChatFormat::kLlama2, ChatFormat::kMistral,
          ChatFormat::kGemma, ChatFormat::kPlain, ChatFormat::kLlama31, ChatFormat::kMistralV3}) {
      ChatSpecialTokens special;
      if (f == ChatFormat::kLlama3 || f == ChatFormat::kLlama31) {
        special.bos = "<|begin_of_text|>";
        special.eos = "<|eot_id|>";
      } else if (f == ChatFormat::kGemma) {
        special.bos = "<bos>";
        special.eos = "<eos>";
      } else if (f == ChatFormat::kChatMl) {
        special.eos = "<|im_end|>";
        special.default_system = "You are a helpful assistant.";
      } else if (f != ChatFormat::kPlain) {
        special.bos = "<s>";
        special.eos = "</s>";
      }
      auto chat = ChatTemplate::Create(f, tokenizer_, special);
      ASSERT_TRUE(chat.ok()) << ChatFormatName(f) << ": " << chat.status();
      templates_->push_back(std::move(*chat));
    }
  }
  static void TearDownTestSuite() {
    delete templates_;
    delete tokenizer_;
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  // Grammar of a parsed request's output format, walked by a matcher over a random
  // document of it and over random bytes.
  static void WalkFormat(const GenerationParams& p, std::mt19937_64& rng, const std::string& body) {
    absl::StatusOr<std::shared_ptr<const structured::Grammar>> grammar;
    if (p.grammar != nullptr) {
      grammar = p.grammar;  // as served: tools' answers, compiled when the request was read
    } else if (p.format == OutputFormat::kJsonSchema) {
      grammar = structured::Grammar::FromSchema(p.json_schema, rng() % 2 == 0, p.lenient_schema);
    } else if (p.format == OutputFormat::kChoice) {
      grammar = structured::Grammar::Choice(p.choices);
    } else if (p.format == OutputFormat::kJsonObject) {
      grammar = structured::Grammar::JsonObject();
    } else {
      return;
    }
    if (!grammar.ok()) {
      ExpectRefusal(grammar.status(), "grammar", body);
      return;
    }
    const auto doc = testing::RandomDocument(*grammar, rng);
    if (doc.has_value()) {
      structured::JsonMatcher m(*grammar);
      EXPECT_TRUE(m.Advance(*doc) && m.IsComplete()) << *doc << "\nbody: " << body.substr(0, 600);
    }
    structured::JsonMatcher m(*grammar);
    for (int i = 0; i < 64 && !m.dead(); ++i) m.Advance(std::string(1, static_cast<char>(rng())));
  }

  // Each family renders the conversation or refuses it; what renders also encodes.
  static void RenderAll(const std::vector<ChatMessage>& messages,
                        const std::vector<std::string>& tools, bool continue_final,
                        const std::string& body) {
    for (const ChatTemplate& chat : *templates_) {
      ChatRenderOptions options;
      options.tools = tools;
      options.continue_final_message = continue_final;
      options.add_generation_prompt = !continue_final;
      auto ids = chat.RenderIds(messages, options);
      if (!ids.ok()) ExpectRefusal(ids.status(), std::string(ChatFormatName(chat.format())), body);
    }
  }

  // The answer read as calls of each style: whatever the text, calls of known tools only.
  static void ReadAnswers(ToolSet tools, std::mt19937_64& rng) {
    const std::string answers[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Oslo\"}}\n</tool_call>",
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
        "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]", "Just text."};
    for (ToolCallStyle style :
         {ToolCallStyle::kTagged, ToolCallStyle::kJson, ToolCallStyle::kMistral}) {
      tools.style = style;
      for (std::string text : answers) {
        if (rng() % 2 == 0 && !text.empty()) text.resize(rng() % text.size());
        if (rng() % 2 == 0 && !text.empty()) text[rng() % text.size()] = "{}[]\",:<>"[rng() % 9];
        const ToolAnswer answer = ReadToolAnswer(text, tools);
        for (const ToolCallOut& call : answer.calls) {
          bool known = false;
          for (const ToolFunction& f : tools.functions) known = known || f.name == call.name;
          EXPECT_TRUE(known) << call.name << " from " << text;
          EXPECT_FALSE(call.id.empty());
          EXPECT_FALSE(json::parse(call.arguments, nullptr, false).is_discarded())
              << call.arguments;
        }
      }
    }
  }

  // One body through the parser of `endpoint` and what a replica does with what it gives;
  // whether the parser accepted it.
  static bool Feed(const std::string& endpoint, const std::string& body, std::mt19937_64& rng) {
    if (endpoint == "chat") {
      auto r = ParseChatCompletionRequest(body);
      if (!Parsed(r, "chat", body)) return false;
      WalkFormat(r->params, rng, body);
      if (r->tools.active()) {
        auto held = HeldAnswerSchema(r->tools);
        if (!held.ok()) ExpectRefusal(held.status(), "held schema", body);
        ReadAnswers(r->tools, rng);
      }
      RenderAll(r->messages, r->tools.Shown(), r->continue_final_message, body);
    } else if (endpoint == "completions") {
      auto r = ParseCompletionRequest(body);
      if (!Parsed(r, "completions", body)) return false;
      WalkFormat(r->params, rng, body);
      for (const CompletionPrompt& p : r->prompts) {
        if (!p.text.empty()) {
          EXPECT_TRUE(tokenizer_->Encode(p.text, true).ok()) << body;
        }
      }
    } else if (endpoint == "responses") {
      auto r = ParseResponsesRequest(body);
      if (!Parsed(r, "responses", body)) return false;
      WalkFormat(r->params, rng, body);
      std::vector<ChatMessage> messages = r->input;
      if (!r->instructions.empty())
        messages.insert(messages.begin(), ChatMessage("system", r->instructions));
      RenderAll(messages, r->tools.Shown(), false, body);
      // What the version would keep reads back, and its input items page under any query
      // or are refused precisely.
      StoredResponse kept{.answer = {}, .echo = r->echo, .input_items = r->input_items};
      auto back = ParseStoredResponse(StoredResponseJson(kept));
      EXPECT_TRUE(back.ok()) << back.status() << "\nbody: " << body.substr(0, 600);
      if (back.ok() && r->input_items.size() <= kMaxKeptInputBytes) {
        EXPECT_EQ(back->input_items, r->input_items) << body.substr(0, 600);
        EXPECT_EQ(back->echo, r->echo) << body.substr(0, 600);
        static const char* const kQueries[] = {"",        "limit=1",          "limit=0&order=asc",
                                               "order=x", "after=item_0",     "before=item_1",
                                               "after=%", "limit=99999999999"};
        const std::string query = kQueries[rng() % std::size(kQueries)];
        auto page = InputItemsPage(back->input_items, query);
        if (!page.ok()) ExpectRefusal(page.status(), "input_items?" + query, body);
      }
    } else if (endpoint == "tokenize") {
      auto r = ParseTokenizeRequest(body);
      if (!Parsed(r, "tokenize", body)) return false;
      if (r->prompt.has_value()) {
        EXPECT_TRUE(tokenizer_->Encode(*r->prompt, r->add_special_tokens).ok()) << body;
      } else {
        RenderAll(r->messages, r->tools, r->continue_final_message, body);
      }
    } else {
      auto r = ParseDetokenizeRequest(body);
      if (!Parsed(r, "detokenize", body)) return false;
      for (int32_t id : r->tokens) EXPECT_GE(id, 0);
    }
    return true;
  }

  inline static std::filesystem::path* dir_ = nullptr;
  inline static Tokenizer* tokenizer_ = nullptr;
  inline static std::vector<ChatTemplate>* templates_ = nullptr;
};

TEST_F(RequestFuzzTest, TheSeedsAreAccepted) {
  std::mt19937_64 rng(1);
  for (const auto& [endpoint, seed] : Seeds()) {
    const std::string body = seed.dump();
    if (endpoint == "chat") {
      auto r = ParseChatCompletionRequest(body);
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << body;
    } else if (endpoint == "completions") {
      ASSERT_TRUE(ParseCompletionRequest(body).ok()) << ParseCompletionRequest(body).status();
    } else if (endpoint == "responses") {
      ASSERT_TRUE(ParseResponsesRequest(body).ok()) << ParseResponsesRequest(body).status();
    } else if (endpoint == "tokenize") {
      ASSERT_TRUE(ParseTokenizeRequest(body).ok()) << ParseTokenizeRequest(body).status();
    } else {
      ASSERT_TRUE(ParseDetokenizeRequest(body).ok()) << ParseDetokenizeRequest(body).status();
    }
    Feed(endpoint, body, rng);
  }
}

TEST_F(RequestFuzzTest, MutatedBodiesAreServedOrRefusedPrecisely) {
  std::mt19937_64 rng(20261206);
  const auto seeds = Seeds();
  std::map<std::string, std::pair<int, int>> accepted;  // endpoint: (accepted, fed)
  for (int i = 0; i < 8000; ++i) {
    const auto& [endpoint, seed] = seeds[i % seeds.size()];
    const std::string body = Mutate(seed, rng);
    auto& [ok, fed] = accepted[endpoint];
    ok += Feed(endpoint, body, rng);
    ++fed;
    // The same body at every endpoint: a field of one read where another is expected.
    if (i % 8 == 0) {
      for (const char* other : {"chat", "completions", "responses", "tokenize", "detokenize"}) {
        Feed(other, body, rng);
      }
    }
    if (HasFailure()) break;
  }
  // The mutations reach past the parsers: a tenth or more of each endpoint's bodies is
  // accepted and goes on to the grammars, the templates and the tokenizer.
  for (const auto& [endpoint, counts] : accepted) {
    EXPECT_GT(counts.first * 10, counts.second)
        << endpoint << ": " << counts.first << " of " << counts.second;
    std::printf("%s: %d of %d mutated bodies accepted\n", endpoint.c_str(), counts.first,
                counts.second);
  }
}

}  // namespace
}  // namespace kvfold::http
