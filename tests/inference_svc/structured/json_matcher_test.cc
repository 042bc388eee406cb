// The JSON matcher against an independent parser (nlohmann::json), the schema compiler's
// refusals, and the token mask against trying every token on its own.
#include "inference_svc/structured/json_matcher.h"

#include <gtest/gtest.h>

#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/token_constraint.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/inference_svc/structured/matcher_testing.h"
#include "tests/inference_svc/structured/random_document.h"
#include "tests/testing/count_allocations.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::structured {
namespace {

using json = nlohmann::json;

TEST(JsonMatcherTest, ObjectsAreWholeAndTheirPrefixesOnTheWay) {
  const auto g = Grammar::JsonObject(/*compact=*/false);
  for (const std::string doc : {
           R"({})",
           R"( { "a" : 1 } )",
           R"({"a":[1,-2.5e+3,0.25,-0,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9y"],"b":{}})",
           "{\"caf\xc3\xa9\":\"\xe2\x82\xac\xf0\x9f\x98\x80\"}",
           R"({"n":{"m":{"k":[[[]]]}}})",
           R"({"e":1E5,"f":12.0e-07})",
       }) {
    SCOPED_TRACE(doc);
    JsonMatcher m(g);
    const std::string trimmed = doc.substr(0, doc.find_last_not_of(' ') + 1);
    for (size_t i = 0; i < trimmed.size(); ++i) {
      ASSERT_FALSE(m.IsComplete()) << "after " << i << " bytes";
      ASSERT_TRUE(m.Advance(trimmed.substr(i, 1))) << "byte " << i;
    }
    EXPECT_TRUE(m.IsComplete());
    EXPECT_FALSE(m.CanContinue());  // nothing follows a closed object
    EXPECT_TRUE(json::accept(trimmed));
  }
}

TEST(JsonMatcherTest, NotJsonOrNotAnObjectDies) {
  const auto g = Grammar::JsonObject(/*compact=*/false);
  for (const std::string bad : {"[]",
                                "1",
                                "\"s\"",
                                "true",
                                "{,}",
                                "{\"a\"}",
                                "{\"a\":}",
                                "{\"a\":1,}",
                                "{\"a\" 1}",
                                "{a:1}",
                                "{\"a\":01}",
                                "{\"a\":1.}",
                                "{\"a\":.5}",
                                "{\"a\":1e}",
                                "{\"a\":-}",
                                "{\"a\":tru}",
                                "{\"a\":nul}",
                                "{\"a\":\"\\x\"}",
                                "{\"a\":\"\x01\"}",
                                "{\"a\":\"\\ud800\"}",
                                "{\"a\":\"\xc0\xaf\"}",
                                "{\"a\":\"\xed\xa0\x80\"}",
                                "{\"a\":\"\xf4\x90\x80\x80\"}",
                                "{\"a\":\"\x80\"}",
                                "{} ",
                                "{}}",
                                "{\"a\":[1 2]}",
                                "{\"a\":[,1]}",
                                "{\"a\":1}{"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(Complete(g, bad));
  }
  // The bounds every document obeys.
  // Built by appends (GCC 12 warns on `"{" + std::string(n, c)`, a false -Wrestrict).
  auto braced = [](size_t n) {
    std::string s = "{";
    s.append(n, ' ');
    s.append("}");
    return s;
  };
  EXPECT_FALSE(Complete(g, braced(kMaxWhitespaceRun + 1)));
  EXPECT_TRUE(Complete(g, braced(kMaxWhitespaceRun)));
  EXPECT_TRUE(Complete(g, "{\"a\":" + std::string(kMaxIntegerDigits, '7') + "}"));
  EXPECT_FALSE(Complete(g, "{\"a\":" + std::string(kMaxIntegerDigits + 1, '7') + "}"));
  std::string deep = "{\"a\":";
  for (int i = 1; i < kMaxDepth; ++i) deep += "[";
  std::string closed = deep + std::string(kMaxDepth - 1, ']') + "}";
  EXPECT_TRUE(Complete(g, closed));
  EXPECT_FALSE(Complete(g, deep + "[]" + std::string(kMaxDepth - 1, ']') + "}"));
}

// Random objects, written compactly with random whitespace, half of them with one byte
// changed: the matcher finds a whole object exactly when nlohmann parses one.
TEST(JsonMatcherTest, AgreesWithNlohmannOnMutatedDocuments) {
  std::mt19937_64 rng(7);
  std::function<json(int)> value = [&](int depth) -> json {
    switch (rng() % (depth < 4 ? 8 : 5)) {
      case 0:
        return json(static_cast<int>(rng() % 2000) - 1000);
      case 1:
        return json(static_cast<double>(rng() % 10000) / 64.0);
      case 2: {
        static const char* const kPieces[] = {"a", "b", "\"", "\\", "\n", "\xc3\xa9"};
        std::string text;
        for (int n = rng() % 4; n > 0; --n) text += kPieces[rng() % 6];
        return json(text);
      }
      case 3:
        return json(rng() % 2 == 0);
      case 4:
        return json(nullptr);
      case 5: {
        json a = json::array();
        for (int i = rng() % 3; i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int i = rng() % 3; i > 0; --i) o[std::string(1, 'a' + rng() % 4)] = value(depth + 1);
        return o;
      }
    }
  };
  const std::string alphabet = "{}[]:,\" \n-+.eE0129tfnul\\/abx\xc3\xa9\x80";
  const auto g = Grammar::JsonObject(/*compact=*/false);
  int whole = 0, cases = 0;
  for (int i = 0; i < 20000; ++i) {
    json o = json::object();
    for (int k = rng() % 4; k > 0; --k) o[std::string(1, 'k' + rng() % 3)] = value(1);
    std::string text;
    for (char c : o.dump()) {
      text += c;
      if (rng() % 8 == 0) text += std::string(1 + rng() % 3, " \n\t"[rng() % 3]);
    }
    if (rng() % 2 == 0 && !text.empty()) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text.erase(at, 1);
          break;
        case 1:
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          text[at] = alphabet[rng() % alphabet.size()];
      }
    }
    // Trailing whitespace is JSON text but not a document kvfold writes (the turn ends
    // at the closing brace).
    const bool trailing = !text.empty() && std::isspace(static_cast<unsigned char>(text.back()));
    json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    const bool expect = !parsed.is_discarded() && parsed.is_object() && !trailing;
    ASSERT_EQ(Complete(g, text), expect) << text;
    whole += expect;
    ++cases;
  }
  EXPECT_GT(whole, cases / 5);
  EXPECT_LT(whole, cases);
}

TEST(JsonMatcherTest, RandomDocumentsParseAsObjects) {
  std::mt19937_64 rng(11);
  const auto g = Grammar::JsonObject(/*compact=*/false);
  for (int i = 0; i < 300; ++i) {
    auto doc = testing::RandomDocument(g, rng);
    ASSERT_TRUE(doc.has_value());
    json parsed;
    try {
      parsed = json::parse(*doc);
    } catch (const json::exception& e) {
      FAIL() << e.what() << ": " << *doc;
    }
    EXPECT_TRUE(parsed.is_object()) << *doc;
  }
}

// What a model is held to: one space at most, and only after ':' or ',' or first.
TEST(JsonMatcherTest, CompactDocumentsSpaceOnlyAfterSeparators) {
  const auto g = Grammar::JsonObject();
  EXPECT_TRUE(Complete(g, R"({"a": 1, "b": [1, 2], "c":{"d":null}})"));
  EXPECT_TRUE(Complete(g, R"({"a":[],"b":{}})"));
  EXPECT_TRUE(Complete(g, " {}"));  // a word-start piece (" {") may begin it
  for (const std::string bad :
       {"  {}", "\n{}", "{ }", "{ \"a\":1}", "{\"a\" :1}", "{\"a\":  1}", "{\"a\":1 }",
        "{\"a\":1,  \"b\":2}", "{\"a\":[ 1]}", "{\"a\":[1 ]}", "{\"a\":\n1}", "{\"a\":\t1}"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(Complete(g, bad));
  }
  // The same schema, not compact, admits JSON's whitespace.
  EXPECT_TRUE(Complete(*Grammar::FromSchema(R"({"type":"object"})", /*compact=*/false),
                       "{\n  \"a\" : [ 1 ,\t2 ]\n}"));
  EXPECT_FALSE(Complete(Schema(R"({"type":"object"})"), "{\n  \"a\" : [ 1 ,\t2 ]\n}"));
}

TEST(JsonSchemaTest, PropertiesInOrderRequiredOnesPresent) {
  const auto g = Schema(R"({"type":"object","properties":{
      "name":{"type":"string","minLength":1,"maxLength":8},
      "age":{"type":"integer"},
      "tags":{"type":"array","items":{"enum":["a","b",3]},"minItems":1,"maxItems":2},
      "pet":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/pet"}]}},
      "required":["name","tags"],
      "$defs":{"pet":{"type":"object","properties":{"kind":{"const":"cat"}},
                      "required":["kind"],"additionalProperties":false}}})");
  EXPECT_TRUE(Complete(g, R"({"name":"x","tags":["a"]})"));
  EXPECT_TRUE(Complete(g, R"({"name":"x","age":-3,"tags":[3,"b"],"pet":{"kind":"cat"}})"));
  EXPECT_TRUE(Complete(g, R"({"name":"x","tags":["a"],"pet":null})"));
  EXPECT_FALSE(Complete(g, R"({"tags":["a"],"name":"x"})"));          // out of order
  EXPECT_FALSE(Complete(g, R"({"name":"x"})"));                       // tags required
  EXPECT_FALSE(Complete(g, R"({"name":"","tags":["a"]})"));           // minLength
  EXPECT_FALSE(Complete(g, R"({"name":"123456789","tags":["a"]})"));  // maxLength
  EXPECT_FALSE(Complete(g, R"({"name":"x","age":1.5,"tags":["a"]})"));
  EXPECT_FALSE(Complete(g, R"({"name":"x","tags":[]})"));             // minItems
  EXPECT_FALSE(Complete(g, R"({"name":"x","tags":["a","b","a"]})"));  // maxItems
  EXPECT_FALSE(Complete(g, R"({"name":"x","tags":["c"]})"));          // enum
  EXPECT_FALSE(Complete(g, R"({"name":"x","tags":["a"],"pet":{}})"));
  EXPECT_FALSE(Complete(g, R"({"name":"x","tags":["a"],"extra":1})"));
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    auto doc = testing::RandomDocument(g, rng);
    ASSERT_TRUE(doc.has_value());
    json d = json::parse(*doc);
    ASSERT_TRUE(d.is_object());
    EXPECT_TRUE(d.contains("name") && d["name"].is_string()) << *doc;
    EXPECT_TRUE(d.contains("tags") && d["tags"].is_array()) << *doc;
    if (d.contains("age")) {
      EXPECT_TRUE(d["age"].is_number_integer()) << *doc;
    }
  }
}

TEST(JsonSchemaTest, RootsOfEveryKind) {
  EXPECT_TRUE(Complete(Schema(R"({"type":"integer"})"), "-12"));
  EXPECT_FALSE(Complete(Schema(R"({"type":"integer"})"),
                        "-1"
                        "2.0"));
  EXPECT_TRUE(Complete(Schema(R"({"type":"number"})"), "2.5e3"));
  EXPECT_TRUE(Complete(Schema(R"({"type":["string","null"]})"), "null"));
  EXPECT_TRUE(Complete(Schema(R"({"type":["string","null"]})"), "\"n\""));
  EXPECT_TRUE(Complete(Schema(R"({"enum":[1,10,100]})"), "10"));
  EXPECT_TRUE(Complete(Schema(R"({"enum":[1,2],"const":2})"), "2"));
  EXPECT_FALSE(Complete(Schema(R"({"enum":[1,2],"const":2})"), "1"));
  EXPECT_TRUE(Complete(Schema(R"({"enum":[1,10,100]})"), "1"));
  EXPECT_FALSE(Complete(Schema(R"({"enum":[1,10,100]})"), "1000"));
  EXPECT_TRUE(Complete(Schema(R"({"type":"array","items":{"type":"boolean"}})"), "[true, false]"));
  EXPECT_TRUE(Complete(Schema("{}"), "[1,{\"a\":null}]"));
  EXPECT_TRUE(Complete(Schema("true"), "\"s\""));
  // A number at the root may go on; a closed array may not.
  JsonMatcher number(Schema(R"({"type":"number"})"));
  ASSERT_TRUE(number.Advance("12"));
  EXPECT_TRUE(number.IsComplete());
  EXPECT_TRUE(number.CanContinue());
  // A recursive schema: a tree of nodes.
  const auto tree = Schema(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
      "properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v"]}}})");
  EXPECT_TRUE(Complete(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(Complete(tree, R"({"v":1,"kids":[{}]})"));
}

// vLLM's guided_choice: exactly one of the texts, nothing before or after.
TEST(JsonSchemaTest, AChoiceIsExactlyOneOfItsTexts) {
  auto g = Grammar::Choice({"yes", "yes, sure", "no"});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Complete(*g, "no"));
  EXPECT_TRUE(Complete(*g, "yes, sure"));
  EXPECT_FALSE(Complete(*g, " no"));
  EXPECT_FALSE(Complete(*g, "no "));
  EXPECT_FALSE(Complete(*g, "yes,"));
  JsonMatcher yes(*g);
  ASSERT_TRUE(yes.Advance("yes"));
  EXPECT_TRUE(yes.IsComplete());
  EXPECT_TRUE(yes.CanContinue());  // ", sure" may follow
  JsonMatcher no(*g);
  ASSERT_TRUE(no.Advance("no"));
  EXPECT_FALSE(no.CanContinue());
  EXPECT_EQ(Grammar::Choice({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Grammar::Choice({"a", ""}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Grammar::Choice({"a", "a"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Grammar::Choice(std::vector<std::string>(65, "x")).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A text may begin with whitespace (a model's answer after "[/INST]" often does): the
  // whitespace is the text's, not JSON's, so it must be there and no more of it.
  auto spaced = Grammar::Choice({" [1]", "\n two", "three"});
  ASSERT_TRUE(spaced.ok()) << spaced.status();
  EXPECT_TRUE(Complete(*spaced, " [1]"));
  EXPECT_TRUE(Complete(*spaced, "\n two"));
  EXPECT_TRUE(Complete(*spaced, "three"));
  EXPECT_FALSE(Complete(*spaced, "[1]"));
  EXPECT_FALSE(Complete(*spaced, "  [1]"));
  EXPECT_FALSE(Complete(*spaced, " three"));
  // JSON literals (an enum's values) still take JSON's whitespace before them.
  const auto colours = Schema(R"({"type":"object","properties":{"c":{"enum":["red",1]}},
      "required":["c"],"additionalProperties":false})");
  EXPECT_TRUE(Complete(colours, R"({"c": "red"})"));
  EXPECT_TRUE(Complete(colours, R"({"c": 1})"));
}

// Ambiguity costs bounded work: alternatives within alternatives are counted out at
// compile time, and stacks that stay alike over nested arrays are capped per byte.
TEST(JsonSchemaTest, AmbiguousSchemasCostBoundedWork) {
  // 2 x 2 x ... (20 levels) alternatives through shared definitions: 2^20 at once.
  std::string defs;
  for (int i = 0; i < 20; ++i) {
    defs += "\"a" + std::to_string(i) + "\":{\"anyOf\":[{\"$ref\":\"#/$defs/a" +
            std::to_string(i + 1) + "\"},{\"$ref\":\"#/$defs/a" + std::to_string(i + 1) + "\"}]},";
  }
  defs += "\"a20\":{\"type\":\"string\"}";
  auto wide = Grammar::FromSchema("{\"$ref\":\"#/$defs/a0\",\"$defs\":{" + defs + "}}");
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("alternatives"), std::string::npos) << wide.status();

  // Two alike array alternatives nested: the stacks double with each '[' until the cap.
  const auto g = Schema(
      R"({"$ref":"#/$defs/n","$defs":{"n":{"anyOf":[{"type":"array","items":{"$ref":"#/$defs/n"}},)"
      R"({"type":"array","items":{"$ref":"#/$defs/n"}},{"type":"null"}]}}})");
  EXPECT_TRUE(Complete(g, "[[null]]"));
  JsonMatcher m(g);
  EXPECT_FALSE(m.Advance(std::string(kMaxDepth, '[')));  // 2^7 > kMaxStacks on the way
}

// Random schemas, well formed or not, from the keywords the compiler reads and some it
// refuses: each compiles or is refused with INVALID_ARGUMENT, never crashes or hangs, and
// every document a compiled one lets a random walk write, or finds whole among random
// bytes, parses.
TEST(JsonSchemaTest, RandomSchemasCompileOrAreRefused) {
  std::mt19937_64 rng(2026);
  std::function<json(int)> schema = [&](int depth) -> json {
    auto leaf = [&]() -> json {
      switch (rng() % 8) {
        case 0:
          return {{"type", "string"}, {"maxLength", static_cast<int>(rng() % 6)}};
        case 1:
          return {{"type", "integer"}};
        case 2:
          return {{"enum", {1, "a", nullptr, true}}};
        case 3:
          return {{"const", "k"}};
        case 4:
          return {{"type", {"number", "null"}}};
        case 5:
          return json(rng() % 2 == 0);
        case 6:
          return {{"$ref", "#/$defs/d"}};
        default:
          return {{"type", "string"}, {"minLength", static_cast<int>(rng() % 4) - 1}};
      }
    };
    if (depth > 3) return leaf();
    switch (rng() % 6) {
      case 0: {
        json props = json::object();
        json required = json::array();
        for (int i = rng() % 4; i > 0; --i) {
          const std::string name(1, 'a' + rng() % 5);
          props[name] = schema(depth + 1);
          if (rng() % 2) required.push_back(name);
        }
        if (rng() % 8 == 0) required.push_back("zz");
        return {{"type", "object"}, {"properties", props}, {"required", required}};
      }
      case 1:
        return {{"type", "array"},
                {"items", schema(depth + 1)},
                {"maxItems", static_cast<int>(rng() % 4)}};
      case 2: {
        json alts = json::array();
        for (int i = rng() % 4; i > 0; --i) alts.push_back(schema(depth + 1));
        return {{rng() % 2 ? "anyOf" : "oneOf", alts}};
      }
      case 3:
        return {{"allOf", {schema(depth + 1)}}};
      case 4:
        return {{"type", "object"}, {"additionalProperties", schema(depth + 1)}};
      default:
        return leaf();
    }
  };
  int compiled = 0, documents = 0;
  for (int i = 0; i < 2000; ++i) {
    json s = schema(0);
    if (s.is_object())
      s["$defs"] = {{"d", rng() % 3 == 0 ? json{{"$ref", "#/$defs/d"}} : schema(2)}};
    auto g = Grammar::FromSchema(s.dump());
    if (!g.ok()) {
      EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << s.dump();
      continue;
    }
    ++compiled;
    for (int k = 0; k < 3; ++k) {
      auto doc = testing::RandomDocument(*g, rng);
      if (!doc.has_value()) continue;
      ++documents;
      EXPECT_FALSE(json::parse(*doc, nullptr, false).is_discarded()) << s.dump() << "\n" << *doc;
    }
    // Random bytes: whatever the matcher finds whole, nlohmann parses.
    JsonMatcher m(*g);
    const std::string bytes = "{}[]\":,0-1.etrunl a\\";
    std::string text;
    for (int b = 0; b < 64 && !m.dead(); ++b) {
      text += bytes[rng() % bytes.size()];
      if (m.Advance(text.substr(text.size() - 1)) && m.IsComplete()) {
        EXPECT_FALSE(json::parse(text, nullptr, false).is_discarded()) << s.dump() << "\n" << text;
      }
    }
  }
  EXPECT_GT(compiled, 1000);
  EXPECT_GT(documents, 2 * compiled);
}

// A schema's patterns are bounded together: 40 x 40 x 40 short patterns (a 1.4 MB schema)
// would take over 1 GB of tables; refused past kMaxSchemaPatternBytes.
TEST(JsonSchemaTest, ASchemasPatternsAreBoundedTogether) {
  auto level = [](const std::string& inner) {
    std::string s = R"({"type":"object","properties":{)";
    for (int i = 0; i < 40; ++i) absl::StrAppend(&s, i ? "," : "", "\"p", i, "\":", inner);
    return s + "}}";
  };
  auto g = Grammar::FromSchema(level(level(level(R"({"pattern":"a"})"))));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("patterns and formats take more than 64 MiB"),
            std::string::npos)
      << g.status();
  EXPECT_TRUE(Grammar::FromSchema(level(level(R"({"pattern":"a"})"))).ok());
}

TEST(JsonSchemaTest, RefusesWhatItCannotHold) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[1]", "must be an object or a boolean"},
      {"false", "admits no value"},
      {R"j({"type":"string","pattern":"(?=a)b"})j", "no string matches it"},
      {R"j({"type":"string","pattern":"^a$b"})j", "no string matches it"},
      {R"j({"type":"string","pattern":"(?<=a)b"})j", "a lookbehind"},
      {R"j({"type":"string","pattern":"(?i)a"})j", "an inline flag"},
      {R"j({"type":"string","pattern":"(?=(?!a))"})j", "a lookaround inside a lookaround"},
      {R"j({"type":"string","pattern":"^((?=a)a)*$"})j", "a lookahead (or '$') inside '*'"},
      {R"j({"type":"string","pattern":"^(a$)+"})j", "a lookahead (or '$') inside '*'"},
      {R"j({"type":"string","pattern":"a(?!^b)"})j", "'^' in a lookahead that does not stand"},
      {R"j({"type":"string","pattern":"(?!^b)"})j", "'^' in a lookahead that does not stand"},
      {R"j({"type":"string","pattern":"^(?!a$b)"})j", "'$' inside a lookahead other than"},
      {R"j({"type":"string","pattern":"$$$$$$$$$a"})j", "more than 8 lookaheads"},
      {R"j({"type":"string","pattern":"^(?=.*a.{11}$)"})j", "make more than 2048 states"},
      {R"j({"type":"string","pattern":"^(?=[^a]{0,2}$)a+$"})j", "no string matches it"},
      {R"j({"type":"string","pattern":"^(?!\\d)\\d","maxLength":3})j", "no string matches it"},
      {R"j({"type":"string","pattern":"^(?=.{3}$)a+$","maxLength":2})j",
       "no match has a length in [0, 2]"},
      {R"({"type":"string","pattern":"(a)\\1"})", "the escape \\1"},
      {R"({"type":"string","pattern":"a^b"})", "other than at the start of a top-level"},
      {R"({"type":"string","pattern":"(^a)b"})", "other than at the start of a top-level"},
      {R"({"type":"string","pattern":"[]a]"})", "starts with ']'"},
      {R"({"type":"string","pattern":"a{2"})", "no quantifier"},
      {R"({"type":"string","pattern":"a**"})", "a quantifier of a quantifier"},
      {R"({"type":"string","pattern":"[a-z]{64}"})", "more than 63 character positions"},
      {R"({"type":"string","pattern":"[^\\s\\S]"})", "matches no character"},
      {R"({"type":"string","pattern":"^a{3}$","maxLength":2})", "no match has a length in [0, 2]"},
      {R"({"type":"string","pattern":"^(ab)+$","minLength":3,"maxLength":3})", "no match has a"},
      {R"({"type":"string","pattern":"a","maxLength":2000})", "over 1024 together with a pattern"},
      {json{{"pattern", std::string(4000, '(')}}.dump(), "groups nested more than 32 deep"},
      {json{{"pattern", std::string(5000, 'a')}}.dump(), "over 4096 bytes"},
      {R"({"type":"string","pattern":3})", "/pattern"},
      {R"({"type":"array","contains":{}})", "keyword 'contains' is not supported"},
      {json{{"enum", Integers(4097)}}.dump(), "4097 values; at most 4096"},
      {json{{"items", {{"enum", Integers(65)}}}, {"uniqueItems", true}}.dump(),
       "items are at most 64 'enum'"},
      {json{{"propertyNames", {{"enum", Integers(65)}}}}.dump(), "at most 64 strings"},
      {json{{"oneOf", std::vector<json>(65, {{"type", "null"}})}}.dump(),
       "oneOf of 65 alternatives; at most 64"},
      {R"({"type":"array","uniqueItems":true})", "/uniqueItems': is supported where the items"},
      {R"({"items":{"type":"number"},"uniqueItems":true})", "not for items of other kinds"},
      {R"({"items":{"type":"integer","minimum":0,"maximum":1},"uniqueItems":true,"minItems":3})",
       "minItems is above the 2 distinct values"},
      {R"({"items":{"type":"integer","multipleOf":2},"uniqueItems":true})",
       "not for items of other kinds"},
      {R"({"items":{"type":"string","pattern":"^a+$"},"uniqueItems":true})",
       "not for items of other kinds"},
      {R"({"items":{"type":"string","format":"email"},"uniqueItems":true})",
       "not for items of other kinds"},
      {R"({"items":{"type":"string","maxLength":0},"uniqueItems":true,"minItems":2})",
       "minItems is above the 1 distinct value"},
      {R"({"prefixItems":[{"const":1}],"items":{"const":2},"uniqueItems":true})",
       "beside tuple places"},
      {R"({"items":{"enum":[1,2,1.0]},"uniqueItems":true})", "values 1 and 1.0 are one value"},
      {R"({"items":{"enum":[{"a":1,"b":2},{"b":2,"a":1}]},"uniqueItems":true})", "are one value"},
      {R"({"items":{"type":"boolean"},"uniqueItems":true,"minItems":3})",
       "minItems is above the 2 distinct values"},
      {R"({"type":"array","uniqueItems":"yes"})", "/uniqueItems': must be a boolean"},
      {R"({"type":"object","minProperties":1})", "where 'propertyNames' lists the keys"},
      {R"({"propertyNames":{"type":"integer"}})", "/propertyNames': must be a schema of strings"},
      {R"({"propertyNames":{"enum":["a",1]}})", "must be a schema of strings"},
      {R"({"properties":{"a":{}},"maxProperties":1})", "/maxProperties': is supported for maps"},
      {R"({"propertyNames":{"enum":["a","b"]},"minProperties":3})",
       "minProperties is above the 2 keys"},
      {R"({"additionalProperties":false,"minProperties":1})", "where no key may be written"},
      {R"({"type":"object","maxProperties":-1})", "/maxProperties"},
      {R"({"type":"string","format":"hostname","minLength":300})",
       "minLength is above the format's most characters (253)"},
      {R"({"type":"integer","multipleOf":0.5})", "must be an integer here (0.5)"},
      {R"({"type":"number","multipleOf":0})", "/multipleOf': must be a number above 0"},
      {R"({"type":"integer","multipleOf":"3"})", "/multipleOf': must be a number above 0"},
      {R"({"type":"integer","multipleOf":7,"minimum":1,"maximum":6})", "no multiple of 7"},
      {R"({"type":"integer","multipleOf":1e300,"minimum":1})", "no multiple of 1000000000000000"},
      {R"({"type":"number","minimum":0.5})", "must be an integer here"},
      {R"({"type":"integer","minimum":3,"exclusiveMaximum":3})", "no value of at most 15"},
      {R"({"type":"number","exclusiveMinimum":2,"maximum":2})", "no value of at most 15"},
      {R"({"type":"integer","minimum":1e16})", "no value of at most 15"},
      {R"({"type":"integer","exclusiveMaximum":true})", "a boolean needs 'maximum'"},
      {R"({"type":"integer","maximum":"3"})", "/maximum"},
      {R"({"properties":{"a":{"type":"text"}}})", "/properties/a/type"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})", "'b' is not in"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "minLength is above maxLength"},
      {R"({"type":"array","minItems":-1})", "/minItems"},
      {R"({"$ref":"http://example.com/s.json"})", "only references into this schema"},
      {R"({"$ref":"#/$defs/missing"})", "names nothing"},
      {R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]})", "use anyOf"},
      {R"({"oneOf":[{"const":"a"},{"enum":["b","a"]}]})", "may admit the same document"},
      {R"({"oneOf":[{"const":1},{"const":1.0}]})", "may admit the same document"},
      {R"({"oneOf":[{"const":"a"},{"type":"string"}]})", "may admit the same document"},
      {R"({"oneOf":[{"const":{"k":1}},{"type":"object"}]})", "may admit the same document"},
      {R"({"oneOf":[{"properties":{"a":{}}},{"properties":{"b":{}}}]})",
       "need a property every one requires"},
      {R"({"oneOf":[{"properties":{"k":{"const":1}},"required":["k"]},
                    {"properties":{"k":{"enum":[2,1.0]}},"required":["k"]}]})",
       "need a property every one requires"},
      {R"({"oneOf":[{"properties":{"k":{"const":1}},"required":["k"]},
                    {"properties":{"k":{"const":2}}}]})",
       "need a property every one requires"},
      {R"({"oneOf":[{"properties":{"k":{"const":1}},"required":["k"]},
                    {"properties":{"k":{"const":2}},"required":["k"]},
                    {"anyOf":[{"type":"object"},{"type":"null"}]}]})",
       "may admit the same document"},
      {R"({"enum":[]})", "non-empty"},
      {R"({"type":"integer","enum":["a"]})", "no value of 'enum'"},
      {R"({"enum":[1,2],"const":3})", "no value of 'enum'"},
      {R"({"$ref":"#","type":"object"})", "cannot be combined"},
      {R"({"allOf":[{},{}]})", "allOf of one schema"},
      // Schemas whose values would open alternatives forever, or too many at once.
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}}})",
       "lead back to themselves"},
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}}})",
       "leads back to itself"},
      {R"({"anyOf":[{"$ref":"#"},{"type":"string"}]})", "leads back to itself"},
  };
  for (const auto& [schema, message] : cases) {
    SCOPED_TRACE(schema);
    auto g = Grammar::FromSchema(schema);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status();
  }
  EXPECT_TRUE(Grammar::FromSchema(R"({"oneOf":[{"type":"string"},{"type":"null"}]})").ok());
  EXPECT_TRUE(Grammar::FromSchema(R"({"type":"string","format":"date","title":"t"})").ok());
}

// The mask walks the vocabulary in byte order, sharing work between tokens; it must give
// what trying each token on its own gives, at every point of a document, and a second
// mask at the same point allocates nothing.
TEST(TokenConstraintTest, MaskEqualsEachTokenTriedAlone) {
  int tried = 0;
  for (const std::string rel :
       {"models/stories260K/tok512.bin", "models/tokenizers/llama2_32000.bin"}) {
    const std::string path = testing::SharedFile(rel);
    if (path.empty()) continue;
    auto tok = Tokenizer::Load(path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    auto table = std::make_shared<TokenTable>(**tok);
    // With an enum long enough to be matched by runs (Node::ranged), and a pattern with
    // lookaheads (a deterministic automaton: Pydantic's for a Decimal).
    json cities = json::array();
    for (int i = 0; i < 100; ++i) cities.push_back(absl::StrCat("c", i));
    const auto g = Schema(absl::StrCat(
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
        "n":{"type":"number"},"ok":{"type":"boolean"},"city":{"enum":)",
        cities.dump(),
        R"j(},"price":{"type":"string","pattern":"^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"},
        "tags":{"type":"array","items":{"type":"string","maxLength":2},"uniqueItems":true},
        "names":{"type":"array","items":{"type":"string","maxLength":30},"uniqueItems":true},
        "ids":{"type":"array","items":{"type":"integer"},"uniqueItems":true}},
        "required":["name","ok"]})j"));
    // Unique strings: "a" after "ab" may not take "b" (it would be full and written); a
    // longer bound admits plain tokens whole until one could fill the string.
    const std::string doc =
        R"({"name": "a\u00e9bcd", "n": -1.5e2, "ok": true, "city": "c42", "price": "-012.50", )"
        R"("tags": ["ab", "a", "b\u0061"], "names": ["x", "xy", "the names of the little dogs"], "ids": [0, 3, 30, -3]})";
    const int32_t eos = (*tok)->eos_id();
    JsonConstraint constraint(g, table, {eos});
    std::vector<float> logits(table->vocab_size(), 0.0f), masked;
    for (size_t i = 0; i <= doc.size(); ++i) {
      SCOPED_TRACE(rel + " after " + doc.substr(0, i));
      ASSERT_TRUE(constraint.Mask(logits, &masked).ok());
      // Again at the same place: the walk reuses what the first one grew.
      const int64_t allocations = g_allocations.load();
      ASSERT_TRUE(constraint.Mask(logits, &masked).ok());
      EXPECT_EQ(g_allocations.load() - allocations, 0);
      const JsonMatcher& at = constraint.matcher();
      for (int32_t id = 0; id < table->vocab_size(); ++id) {
        JsonMatcher alone = at;
        const bool text = !(*tok)->IsSpecial(id) && !table->bytes(id).empty();
        bool expect = text && alone.Advance(table->bytes(id));
        if (id == eos) expect = at.IsComplete();
        ASSERT_EQ(masked[id] == 0.0f, expect) << "id " << id << " '" << table->bytes(id) << "'";
      }
      if (i < doc.size()) {
        JsonMatcher step = at;
        ASSERT_TRUE(step.Advance(doc.substr(i, 1)));
        // Feed the next byte through a token holding exactly it.
        int32_t byte_token = -1;
        for (int32_t id = 0; id < table->vocab_size() && byte_token < 0; ++id) {
          if (table->bytes(id) == doc.substr(i, 1)) byte_token = id;
        }
        ASSERT_GE(byte_token, 0);
        constraint.Accept(byte_token);
      }
    }
    EXPECT_TRUE(constraint.Finished());
    ++tried;
  }
  if (tried == 0) GTEST_SKIP() << testing::MissingShared("models/stories260K/tok512.bin");
}

}  // namespace
}  // namespace kvfold::structured
