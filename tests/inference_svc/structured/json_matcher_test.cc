// The JSON matcher against an independent parser (nlohmann::json), the schema compiler's
// refusals, and the token mask against trying every token on its own.
#include "inference_svc/structured/json_matcher.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/token_constraint.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/inference_svc/structured/random_document.h"
#include "tests/testing/count_allocations.h"
#include "tests/testing/shared_dir.h"

namespace kvfold::structured {
namespace {

using json = nlohmann::json;

bool Complete(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  JsonMatcher m(g);
  return m.Advance(text) && m.IsComplete();
}

// [0, 1, ..., n - 1].
json Integers(int n) {
  json v = json::array();
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

std::shared_ptr<const Grammar> Schema(const std::string& schema) {
  auto g = Grammar::FromSchema(schema);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : Grammar::JsonObject();
}

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

TEST(JsonSchemaTest, RefusesWhatItCannotHold) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[1]", "must be an object or a boolean"},
      {"false", "admits no value"},
      {R"({"type":"string","pattern":"(?=a)b"})", "a lookaround"},
      {R"({"type":"string","pattern":"(a)\\1"})", "the escape \\1"},
      {R"({"type":"string","pattern":"a^b"})", "other than at the start / end of a top-level"},
      {R"({"type":"string","pattern":"(^a)b"})", "other than at the start / end of a top-level"},
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
      {R"({"items":{"type":"string"},"uniqueItems":true})", "not for items of other kinds"},
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

// Tuples: prefixItems (and the older `items` list) fix each place's schema, `items` /
// `additionalItems` the rest.
TEST(JsonSchemaTest, TuplesHoldEachPlace) {
  const auto pair =
      Schema(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],)"
             R"("minItems":2,"items":false})");
  EXPECT_TRUE(Complete(pair, R"([1, "a"])"));
  EXPECT_FALSE(Complete(pair, R"(["a", 1])"));
  EXPECT_FALSE(Complete(pair, R"([1])"));
  EXPECT_FALSE(Complete(pair, R"([1, "a", 2])"));
  const auto rest = Schema(R"({"prefixItems":[{"const":"x"}],"items":{"type":"boolean"}})");
  EXPECT_TRUE(Complete(rest, R"([])"));
  EXPECT_TRUE(Complete(rest, R"(["x"])"));
  EXPECT_TRUE(Complete(rest, R"(["x", true, false])"));
  EXPECT_FALSE(Complete(rest, R"(["x", "x"])"));
  EXPECT_FALSE(Complete(rest, R"([true])"));
  const auto old =
      Schema(R"({"items":[{"type":"null"},{"type":"number"}],"additionalItems":false})");
  EXPECT_TRUE(Complete(old, R"([null, 2.5])"));
  EXPECT_TRUE(Complete(old, R"([null])"));
  EXPECT_FALSE(Complete(old, R"([null, 2.5, 3])"));
  const auto none = Schema(R"({"type":"array","items":false})");
  EXPECT_TRUE(Complete(none, "[]"));
  EXPECT_FALSE(Complete(none, "[1]"));
  for (const auto& [schema, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prefixItems":{"type":"string"}})", "must be an array of schemas"},
           {R"({"prefixItems":[{}],"items":[{}]})", "cannot be combined"},
           {R"({"prefixItems":[{}],"additionalItems":false})", "goes with 'items' as a list"},
           {R"({"prefixItems":[{}],"minItems":2,"items":false})", "minItems is above"},
           {R"({"prefixItems":[{"not":{}}]})", "/prefixItems/0"}}) {
    auto g = Grammar::FromSchema(schema);
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status();
  }
}

// Every string of up to max_length characters of `alphabet`, shortest first.
std::vector<std::string> AllStrings(const std::string& alphabet, size_t max_length) {
  std::vector<std::string> strings = {""};
  for (size_t length = 1, begin = 0; length <= max_length; ++length) {
    const size_t end = strings.size();
    for (size_t i = begin; i < end; ++i) {
      for (char ch : alphabet) strings.push_back(strings[i] + ch);
    }
    begin = end;
  }
  return strings;
}

// Patterns against std::regex's ECMAScript search (ASCII strings): every string of up to
// four characters of a small alphabet is a whole document exactly when the pattern
// matches it somewhere (or whole, anchored); escapes are taken as the characters they
// write; random walks (escapes and UTF-8 bytes among them) never reach a dead end and
// write what the pattern matches.
TEST(JsonSchemaTest, PatternsMatchAsEcmaScriptSearches) {
  const std::vector<std::string> patterns = {"^[a-z]+$",
                                             "ab",
                                             "^a?b*$",
                                             "^(ab|b0)+$",
                                             "0$",
                                             "^\\d{2,3}$",
                                             "^[^a\\d]{1,2}$",
                                             "^(?:a|b)-\\w$",
                                             "^\\.?[-_]{0,2}$",
                                             "^.{3}$",
                                             "^\\s*Z\\S?$",
                                             "a|0",
                                             "^[0-9a-f]{2}-?$",
                                             "^a|b$",
                                             "a$|^0-",
                                             "^(a(b)?)*$",
                                             "^\\x41?[\\u0061-b]$",
                                             "^[\\w.]{2}[^\\W_]?$"};
  const std::vector<std::string> strings = AllStrings("ab01-_ .Z\"", 4);
  for (const std::string& pattern : patterns) {
    SCOPED_TRACE(pattern);
    const auto g = Schema(json{{"type", "string"}, {"pattern", pattern}}.dump());
    const std::regex re(pattern, std::regex::ECMAScript);
    for (const std::string& text : strings) {
      const std::string doc = json(text).dump();
      ASSERT_EQ(Complete(g, doc), std::regex_search(text, re)) << doc;
    }
    // The same characters escaped, and a non-ASCII one through each of its bytes.
    EXPECT_EQ(Complete(g, "\"\\u0061\\u0062\""), std::regex_search("ab", re));
    EXPECT_EQ(Complete(g, "\"\\\"\""), std::regex_search("\"", re));
    // Random walks (of a pattern anchored at its start, with no top-level alternative:
    // random bytes seldom write what an unanchored one looks for).
    int depth = 0;
    bool alternatives = false;
    for (char ch : pattern) {
      depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
      alternatives = alternatives || (ch == '|' && depth == 0);
    }
    std::mt19937_64 rng(5);
    for (int i = 0; i < 200 && pattern.front() == '^' && !alternatives; ++i) {
      const auto doc = testing::RandomDocument(g, rng);
      ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
      const std::string text = json::parse(*doc).get<std::string>();
      if (std::all_of(text.begin(), text.end(), [](char ch) { return ch > 0; })) {
        EXPECT_TRUE(std::regex_search(text, re)) << *doc;
      }
    }
  }
}

// Random patterns (every third with length bounds): each compiles or is refused with a
// message, and one std::regex also takes matches exactly the strings std::regex finds it
// in, within the bounds (every string of up to three characters of a small alphabet).
TEST(JsonSchemaTest, RandomPatternsAgreeWithStdRegex) {
  const std::string pieces[] = {"a",   "b",    "0",    "-",      ".",    "\\d",  "\\w", "\\s",
                                "\\D", "[ab]", "[^a]", "[a-z0]", "(",    ")",    "|",   "*",
                                "+",   "?",    "{2}",  "{1,2}",  "{0,}", "{2,}", "(?:", "^",
                                "$",   "\\.",  "[",    "]",      "\\"};
  const std::vector<std::string> strings = AllStrings("ab0- .", 3);
  std::mt19937_64 rng(11);
  int compared = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string pattern;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 7); k < n; ++k) {
      pattern += pieces[rng() % std::size(pieces)];
    }
    // Every third one with length bounds too.
    json schema = {{"type", "string"}, {"pattern", pattern}};
    const int lo = i % 3 == 0 ? static_cast<int>(rng() % 3) : 0;
    const int hi = i % 3 == 0 && rng() % 2 ? lo + static_cast<int>(rng() % 3) : -1;
    if (lo > 0) schema["minLength"] = lo;
    if (hi >= 0) schema["maxLength"] = hi;
    SCOPED_TRACE(schema.dump());
    std::regex re;
    bool regex_ok = true;
    try {
      re = std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      regex_ok = false;
    }
    auto fits = [&](const std::string& text) {
      const int n = static_cast<int>(text.size());
      return std::regex_search(text, re) && n >= lo && (hi < 0 || n <= hi);
    };
    auto g = Grammar::FromSchema(schema.dump());
    if (!g.ok()) {
      EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(g.status().message().find("pattern"), std::string::npos) << g.status();
      // Bounds refused as unmet: no short string meets them either.
      if (regex_ok && g.status().message().find("no match has a length") != std::string::npos) {
        EXPECT_TRUE(std::none_of(strings.begin(), strings.end(), fits));
      }
      continue;
    }
    if (!regex_ok) continue;
    ++compared;
    for (const std::string& text : strings) {
      ASSERT_EQ(Complete(*g, json(text).dump()), fits(text)) << text;
    }
  }
  EXPECT_GT(compared, 500);
}

// minLength / maxLength with a pattern: whole documents exactly when both hold (every
// string of up to five characters), random walks never stuck (the length bounds steer an
// unanchored pattern into its match in time), and bounds no match meets refused.
TEST(JsonSchemaTest, PatternsWithLengthBounds) {
  const std::vector<std::string> strings = AllStrings("ab0-", 5);
  int refused = 0;
  for (const std::string pattern : {"ab", "^(ab)*$", "^a?b*$", "[ab]0", "^.{2,}$", "^\\d+-?$"}) {
    for (const auto& [lo, hi] :
         std::vector<std::pair<int, int>>{{0, 3}, {2, 4}, {3, -1}, {1, 1}, {4, 4}}) {
      json schema = {{"type", "string"}, {"pattern", pattern}, {"minLength", lo}};
      if (hi >= 0) schema["maxLength"] = hi;
      SCOPED_TRACE(schema.dump());
      const std::regex re(pattern, std::regex::ECMAScript);
      auto fits = [&](const std::string& text) {
        const int n = static_cast<int>(text.size());
        return std::regex_search(text, re) && n >= lo && (hi < 0 || n <= hi);
      };
      auto g = Grammar::FromSchema(schema.dump());
      if (!g.ok()) {
        ++refused;
        EXPECT_NE(g.status().message().find("no match has a length"), std::string::npos);
        EXPECT_TRUE(std::none_of(strings.begin(), strings.end(), fits));
        continue;
      }
      for (const std::string& text : strings) {
        ASSERT_EQ(Complete(*g, json(text).dump()), fits(text)) << text;
      }
      std::mt19937_64 rng(3);
      for (int i = 0; i < 100 && hi >= 0; ++i) {
        const auto doc = testing::RandomDocument(*g, rng);
        ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
        const std::string text = json::parse(*doc).get<std::string>();
        if (std::all_of(text.begin(), text.end(), [](char ch) { return ch > 0; })) {
          EXPECT_TRUE(fits(text)) << *doc;
        }
      }
    }
  }
  EXPECT_GE(refused, 3);  // e.g. ^(ab)*$ of length 1, and [ab]0 of length 1
}

// Formats with a fixed shape hold the string to it; other formats annotate.
TEST(JsonSchemaTest, FormatsWithAFixedShape) {
  auto complete = [](const std::string& format, const std::string& text) {
    return Complete(Schema(json{{"type", "string"}, {"format", format}}.dump()), json(text).dump());
  };
  struct Case {
    std::string format, text;
    bool written;
  };
  const std::vector<Case> cases = {
      {"date", "2024-02-28", true},
      {"date", "1999-12-31", true},
      {"date", "2024-02-29", false},  // a leap day: left out
      {"date", "2024-04-31", false},
      {"date", "2024-13-01", false},
      {"date", "24-01-01", false},
      {"date", "0000-11-01", false},  // no year 0 (Python reads none)
      {"date", "0999-11-01", false},
      {"time", "23:59:59.123456+05:30", true},
      {"time", "00:00:00Z", true},
      {"time", "24:00:00Z", false},
      {"time", "12:30:00", false},  // RFC 3339's full-time has an offset
      {"date-time", "2026-12-06T15:04:05Z", true},
      {"date-time", "2026-12-06 15:04:05Z", false},
      {"uuid", "123e4567-e89b-12d3-A456-426614174000", true},
      {"uuid", "123e4567e89b12d3a456426614174000", false},
      {"ipv4", "255.255.0.9", true},
      {"ipv4", "256.1.1.1", false},
      {"ipv4", "01.1.1.1", false},
      {"ipv6", "2001:db8:0:0:0:0:0:1", true},
      {"ipv6", "FFFF:ffff:0:1234:abcd:0:0:9", true},
      {"ipv6", "2001:db8::1", false},  // written in full only
      {"ipv6", "2001:db8:0:0:0:0:0:12345", false},
      {"hostname", "api-7.example.com", true},
      {"hostname", "localhost", true},
      {"hostname", "-a.example", false},
      {"hostname", "a-.example", false},
      {"hostname", "a..example", false},
      {"hostname", std::string(23, 'a'), false},  // labels of 22 at most
      {"email", "jane.doe+tag@mail.example.org", true},
      {"email", "jane@localhost", false},  // two labels or more
      {"email", "jane..doe@example.org", false},
      {"email", ".jane@example.org", false},
      {"email", "not an address", false},
      {"duration", "P3Y6M4DT12H30M5S", true},
      {"duration", "PT36H", true},
      {"duration", "P1M", true},
      {"duration", "P2W", true},
      {"duration", "P1DT1S", true},
      {"duration", "P", false},
      {"duration", "PT", false},
      {"duration", "P1D2Y", false},   // years, months, days in that order
      {"duration", "P1Y2W", false},   // weeks stand alone
      {"duration", "PT1H1S", false},  // RFC 3339: no minute skipped
      {"uri", "not a uri", true},     // an annotation
  };
  for (const Case& c : cases) EXPECT_EQ(complete(c.format, c.text), c.written) << c.text;
  // Without a type, a format held to a shape writes a string; another one any value.
  EXPECT_FALSE(Complete(Schema(R"({"format":"date"})"), "7"));
  EXPECT_TRUE(Complete(Schema(R"({"format":"date"})"), R"("2026-12-06")"));
  EXPECT_TRUE(Complete(Schema(R"({"format":"int64"})"), "7"));
  // A host name is at most 253 characters, with or without maxLength.
  std::string long_host(22, 'a');
  for (int i = 0; i < 11; ++i) long_host.append(1, '.').append(21, 'b');
  ASSERT_EQ(long_host.size(), 264u);
  EXPECT_FALSE(complete("hostname", long_host));
  EXPECT_TRUE(complete("hostname", long_host.substr(0, 253)));
  EXPECT_FALSE(complete("hostname", long_host.substr(0, 254)));
  EXPECT_FALSE(
      Complete(Schema(R"({"type":"string","format":"hostname","maxLength":5})"), R"("abcdef")"));
  EXPECT_TRUE(Complete(Schema(R"({"type":"string","format":"date","pattern":"^x$"})"), R"("x")"));
}

// Characters past ASCII are code points to a pattern, raw or escaped; the shorthands keep
// to what ECMA-262 and Python both count.
TEST(JsonSchemaTest, PatternsTakeCodePoints) {
  auto complete = [](const std::string& pattern, const std::string& doc) {
    return Complete(Schema(json{{"type", "string"}, {"pattern", pattern}}.dump()), doc);
  };
  EXPECT_TRUE(complete("^.$", "\"\xC3\xA9\""));  // é, one character
  EXPECT_FALSE(complete("^.$", "\"\xC3\xA9\xC3\xA9\""));
  EXPECT_TRUE(complete("^\xC3\xA9+$", "\"\xC3\xA9\\u00e9\""));
  EXPECT_TRUE(complete("^[\xC3\xA0-\xC3\xBF]$", "\"\xC3\xA9\""));
  EXPECT_TRUE(complete("^[^a]$", "\"\xF0\x9F\x98\x80\""));  // U+1F600
  EXPECT_FALSE(complete("^\\w$", "\"\xC3\xA9\""));          // a word character to Python only
  EXPECT_FALSE(complete("^\\W$", "\"\xC3\xA9\""));
  EXPECT_FALSE(complete("^[^\\d]$", "\"\xC3\xA9\""));
  EXPECT_FALSE(complete("^\\S$", "\"\xC2\xA0\""));  // no-break space: a space to both
  EXPECT_FALSE(complete("^.$", "\"\\u2028\""));     // a line terminator to ECMA-262
  EXPECT_TRUE(complete("^a\\nb$", "\"a\\nb\""));
  // A character's first byte only when what it may become can follow: a lead byte of
  // U+0080..U+07FF against [a-z].
  JsonMatcher m(Schema(R"({"type":"string","pattern":"^[a-z]$"})"));
  EXPECT_TRUE(m.Advance("\""));
  JsonMatcher next = m;
  EXPECT_FALSE(m.AdvanceInto(0xC3, &next));
  EXPECT_FALSE(m.AdvanceInto('\\', &next) && next.Advance("u0") && next.Advance("1"));
  EXPECT_TRUE(m.AdvanceInto('\\', &next) && next.Advance("u006") && next.Advance("1\""));
}

// Whether some bytes (at most `depth`) take m to a whole document: a depth-first search
// over the bytes a number may hold, of at most *budget matchers (a matcher with dead ends
// would make it exponential).
bool Completable(const JsonMatcher& m, int depth, int* budget) {
  if (m.IsComplete()) return true;
  if (depth == 0 || --*budget < 0) return false;
  JsonMatcher next = m;
  for (char c : std::string("0123456789.-")) {
    if (m.AdvanceInto(static_cast<uint8_t>(c), &next) && Completable(next, depth - 1, budget)) {
      return true;
    }
  }
  return false;
}

// Each prefix of number `text` the matcher keeps alive goes on to a whole document: found
// by Completable with at most `budget` matchers per prefix.
void ExpectPrefixesComplete(const std::shared_ptr<const Grammar>& g, const std::string& text,
                            int budget) {
  JsonMatcher m(g);
  for (char ch : text) {
    if (!m.Advance(std::string(1, ch))) break;
    int left = budget;
    EXPECT_TRUE(Completable(m, kMaxBoundedDigits + 2, &left)) << "after a prefix of " << text;
  }
}

// Numeric bounds against the doubles a parser reads: every integer in a wide range and
// decimals around the bounds are whole documents exactly when their double lies within
// the schema's bounds (integers: without a fraction), every prefix the matcher keeps
// alive can still end in bounds, and random documents lie within them.
TEST(JsonSchemaTest, NumericBoundsHoldExactly) {
  struct Case {
    std::string schema;
    bool integer;
    double lo, hi;
    bool lo_open, hi_open;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {R"({"type":"integer","minimum":-12,"maximum":305})", true, -12, 305, false, false},
      {R"({"type":"integer","exclusiveMinimum":-12.5,"exclusiveMaximum":0})", true, -12.5, 0, true,
       true},
      {R"({"type":"integer","minimum":7})", true, 7, inf, false, false},
      {R"({"type":"integer","maximum":-3,"minimum":-1e300})", true, -inf, -3, false, false},
      {R"({"type":"integer","minimum":0,"exclusiveMinimum":true,"maximum":10})", true, 0, 10, true,
       false},
      {R"({"type":"integer","minimum":42,"maximum":42})", true, 42, 42, false, false},
      {R"({"type":"number","minimum":0,"maximum":1})", false, 0, 1, false, false},
      {R"({"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":3})", false, -2, 3, true, true},
      {R"({"type":"number","minimum":-100,"exclusiveMinimum":-5,"maximum":250})", false, -5, 250,
       true, false},
      {R"({"maximum":-1})", false, -inf, -1, false, false},
      {R"({"type":["number","null"],"exclusiveMaximum":0})", false, -inf, 0, false, true},
  };
  std::vector<std::string> texts = {"-0", "0", "-0.0", "0.000", "-", "1e2", "-1E1", "00", "01"};
  for (int i = -1100; i <= 1100; ++i) texts.push_back(std::to_string(i));
  for (int i = -30; i <= 30; ++i) {
    for (const char* f : {".0", ".5", ".05", ".9999", ".000", ".00001"}) {
      texts.push_back((i == 0 ? "-0" : std::to_string(i)) + f);
      if (i == 0) texts.push_back(std::string("0") + f);
    }
  }
  std::mt19937_64 rng(17);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const auto g = Schema(c.schema);
    for (const std::string& text : texts) {
      const bool number = text.find_first_of("e.E") == std::string::npos || !c.integer;
      char* end = nullptr;
      const double x = std::strtod(text.c_str(), &end);
      const bool json_number = !json::parse(text, nullptr, false).is_discarded() &&
                               text.find_first_of("eE") == std::string::npos;
      const bool within = (c.lo_open ? x > c.lo : x >= c.lo) && (c.hi_open ? x < c.hi : x <= c.hi);
      EXPECT_EQ(Complete(g, text), json_number && number && within) << text;
      ExpectPrefixesComplete(g, text, 2000);
    }
    for (int i = 0; i < 300; ++i) {
      const auto doc = testing::RandomDocument(g, rng);
      ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
      if (doc->find("null") != std::string::npos) continue;  // (a space may lead)
      const double x = std::strtod(doc->c_str(), nullptr);
      EXPECT_TRUE((c.lo_open ? x > c.lo : x >= c.lo) && (c.hi_open ? x < c.hi : x <= c.hi)) << *doc;
    }
  }
  // Bounds apply inside documents, and past 15 digits no value is written.
  const auto g = Schema(R"({"type":"object","properties":{"n":{"type":"number","minimum":1}}})");
  EXPECT_TRUE(Complete(g, R"({"n":1.5})"));
  EXPECT_FALSE(Complete(g, R"({"n":0.5})"));
  EXPECT_TRUE(Complete(g, R"({"n":12345678901234.5})"));
  EXPECT_FALSE(Complete(g, R"({"n":12345678901234.56})"));
}

// Every sequence of at most `longest` symbols of `symbols` (0 .. symbols - 1), the empty
// one first.
std::vector<std::vector<int>> Sequences(size_t symbols, size_t longest) {
  std::vector<std::vector<int>> all = {{}};
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].size() == longest) continue;
    for (int v = 0; v < static_cast<int>(symbols); ++v) {
      all.push_back(all[i]);
      all.back().push_back(v);
    }
  }
  return all;
}

// An enum or a choice of more than 64 values is matched by runs of its sorted values:
// every value is written whole, nothing else is, and values that are prefixes of others
// ("7", "70", "700") stay apart.
TEST(JsonSchemaTest, LongListsOfValuesByRuns) {
  json values = json::array();
  for (int i = 0; i < 1000; ++i) values.push_back(absl::StrCat("v", i));
  for (int i = 0; i < 1000; i += 7) values.push_back(i);
  values.push_back("Z\u00fcrich");
  values.push_back(nullptr);
  values.push_back(json{{"k", {1, 2}}});
  const auto g = Schema(json{{"enum", values}}.dump());
  std::set<std::string> texts;
  for (const json& v : values) {
    texts.insert(v.dump());
    EXPECT_TRUE(Complete(g, v.dump())) << v.dump();
  }
  for (const std::string other : {R"("v1000")", R"("v")", R"("v01")", "1", "-7", "7.0",
                                  R"("Zurich")", "true", R"({"k":[1]})", "\"v1\"x"}) {
    EXPECT_FALSE(Complete(g, other)) << other;
  }
  JsonMatcher m(g);
  ASSERT_TRUE(m.Advance("70"));
  EXPECT_TRUE(m.IsComplete());                // 70 is a value
  EXPECT_TRUE(JsonMatcher(m).Advance("0"));   // and so is 700
  EXPECT_FALSE(JsonMatcher(m).Advance("1"));  // 701 is not
  std::mt19937_64 rng(43);
  std::set<std::string> seen;
  for (int i = 0; i < 400; ++i) {
    const auto doc = testing::RandomDocument(g, rng);
    ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
    const std::string text = doc->substr(doc->find_first_not_of(' '));
    EXPECT_TRUE(texts.count(text)) << text;
    seen.insert(text);
  }
  EXPECT_GT(seen.size(), 100u);
  // Raw choices alike, a choice that is a prefix of another included.
  std::vector<std::string> choices = {"yes", "yes, and more", "yes!"};
  for (int i = 0; i < 200; ++i) choices.push_back(absl::StrCat("option ", i));
  auto choice = Grammar::Choice(choices);
  ASSERT_TRUE(choice.ok()) << choice.status();
  for (const std::string& c : choices) EXPECT_TRUE(Complete(*choice, c)) << c;
  EXPECT_FALSE(Complete(*choice, "yes,"));
  EXPECT_FALSE(Complete(*choice, "option 200"));
  EXPECT_FALSE(Complete(*choice, " yes"));
}

// uniqueItems over items of listed values writes each value at most once: every array of
// up to four items of the values (and of one that is not) is whole exactly when its items
// are distinct and within the bounds, and random walks never write a value twice.
TEST(JsonSchemaTest, UniqueItemsOfListedValues) {
  struct Case {
    std::string schema;
    int min_items, max_items;
  };
  const std::vector<Case> cases = {
      {R"({"type":"array","items":{"enum":["a","ab",1,10,null]},"uniqueItems":true})", 0, 5},
      {R"({"items":{"enum":["a","ab",1,10,null]},"uniqueItems":true,"minItems":2,"maxItems":3})", 2,
       3},
      {R"({"type":"array","items":{"enum":["a","ab",1,10,null]},"uniqueItems":false})", 0, 99},
  };
  const std::vector<std::string> values = {R"("a")", R"("ab")", "1", "10", "null", "true"};
  const std::vector<std::vector<int>> arrays = Sequences(values.size(), 4);
  std::mt19937_64 rng(31);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const bool unique = c.schema.find("\"uniqueItems\":true") != std::string::npos;
    const auto g = Schema(c.schema);
    for (const std::vector<int>& a : arrays) {
      std::string text = "[";
      for (size_t i = 0; i < a.size(); ++i) text += (i ? "," : "") + values[a[i]];
      text += "]";
      const std::set<int> distinct(a.begin(), a.end());
      const int n = static_cast<int>(a.size());
      const bool fits = !distinct.count(5) && (!unique || distinct.size() == a.size()) &&
                        n >= c.min_items && n <= c.max_items;
      EXPECT_EQ(Complete(g, text), fits) << text;
    }
    for (int i = 0; i < 300; ++i) {
      const auto doc = testing::RandomDocument(g, rng);
      ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
      const json items = json::parse(*doc);
      ASSERT_TRUE(items.is_array()) << *doc;
      const int n = static_cast<int>(items.size());
      EXPECT_TRUE(n >= c.min_items && n <= c.max_items) << *doc;
      for (int j = 0; unique && j < n; ++j) {
        for (int k = j + 1; k < n; ++k) EXPECT_NE(items[j], items[k]) << *doc;
      }
    }
  }
  // Inside objects, each array its own: a value written in one may be written in the next.
  const auto g = Schema(R"({"type":"array","items":{"type":"array","items":{"type":"boolean"},
                            "uniqueItems":true}})");
  EXPECT_TRUE(Complete(g, "[[true,false],[false,true],[]]"));
  EXPECT_FALSE(Complete(g, "[[true,false],[false,false]]"));
  JsonMatcher m(g);
  EXPECT_TRUE(m.Advance("[[true, "));
  EXPECT_FALSE(JsonMatcher(m).Advance("t"));
  EXPECT_TRUE(m.Advance("false"));
  EXPECT_FALSE(JsonMatcher(m).Advance(","));  // no value left to write
}

// A oneOf of objects told apart by a discriminating property (as Pydantic writes a
// discriminated union): each document is one alternative's, and no other's.
TEST(JsonSchemaTest, DiscriminatedObjectsOfAOneOf) {
  const auto g = Schema(R"({
    "$defs": {
      "Cat": {"type": "object", "title": "Cat", "required": ["pet_type", "meows"],
              "properties": {"pet_type": {"const": "cat", "type": "string"},
                             "meows": {"type": "integer", "minimum": 0, "maximum": 9}}},
      "Dog": {"type": "object", "required": ["barks", "pet_type"],
              "properties": {"barks": {"type": "number", "minimum": 0, "maximum": 9},
                             "pet_type": {"enum": ["dog", "puppy"]}}}},
    "type": "object", "required": ["pet"],
    "properties": {"pet": {
      "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}, {"type": "null"}],
      "discriminator": {"propertyName": "pet_type",
                        "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}}}}})");
  EXPECT_TRUE(Complete(g, R"({"pet":{"pet_type":"cat","meows":3}})"));
  EXPECT_TRUE(Complete(g, R"({"pet":{"barks":1.5,"pet_type":"puppy"}})"));
  EXPECT_TRUE(Complete(g, R"({"pet":null})"));
  EXPECT_FALSE(Complete(g, R"({"pet":{"pet_type":"dog","meows":3}})"));
  EXPECT_FALSE(Complete(g, R"({"pet":{"barks":1,"pet_type":"cat"}})"));
  std::mt19937_64 rng(41);
  int cats = 0, dogs = 0;
  for (int i = 0; i < 300; ++i) {
    const auto doc = testing::RandomDocument(g, rng);
    ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
    const json pet = json::parse(*doc)["pet"];
    if (pet.is_null()) continue;
    const std::string type = pet["pet_type"];
    if (type == "cat") {
      ++cats;
      EXPECT_TRUE(pet.contains("meows") && !pet.contains("barks")) << *doc;
    } else {
      ++dogs;
      EXPECT_TRUE((type == "dog" || type == "puppy") && pet.contains("barks")) << *doc;
    }
  }
  EXPECT_GT(cats, 0);
  EXPECT_GT(dogs, 0);
}

// A oneOf of lists of values no two share (a form's labelled choices) is as their anyOf.
TEST(JsonSchemaTest, OneOfOfDistinctValues) {
  const auto g = Schema(R"({"oneOf":[{"const":"a","title":"A"},{"const":"b","title":"B"},
                                     {"enum":[1,"c",null]},{"type":"array"}]})");
  for (const std::string text : {R"("a")", R"("b")", "1", R"("c")", "null", "[]", "[1]"}) {
    EXPECT_TRUE(Complete(g, text)) << text;
  }
  for (const std::string text : {R"("d")", "2", "true", "{}"}) {
    EXPECT_FALSE(Complete(g, text)) << text;
  }
  EXPECT_TRUE(Complete(Schema(R"({"oneOf":[{"enum":["a","b"]},{"type":"null"}]})"), "null"));
}

// Telling a oneOf's objects apart is bounded work: 17 objects whose 16 keys each list
// 4,096 values, the last object's the same as the first's, would compare 16 x 17 x 4,096
// values; the check stops past kMaxDiscriminatorValues and refuses.
TEST(JsonSchemaTest, DiscriminatorWorkIsBounded) {
  json schema = {{"oneOf", json::array()}, {"$defs", json::object()}};
  for (int i = 0; i < 17; ++i) {
    json values = json::array();
    for (int v = 0; v < 4096; ++v) values.push_back((i % 16) * 4096 + v);
    const std::string name = absl::StrCat("E", i);
    schema["$defs"][name] = {{"enum", values}};
    json object = {{"type", "object"}, {"required", json::array()}};
    for (int k = 0; k < 16; ++k) {
      object["properties"][absl::StrCat("k", k)] = {{"$ref", "#/$defs/" + name}};
      object["required"].push_back(absl::StrCat("k", k));
    }
    schema["oneOf"].push_back(object);
  }
  auto g = Grammar::FromSchema(schema.dump());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("values to compare to tell its objects apart"),
            std::string::npos)
      << g.status();
  // The same objects with distinct values: told apart by the first key.
  for (int v = 0; v < 4096; ++v) schema["$defs"]["E16"]["enum"][v] = 16 * 4096 + v;
  EXPECT_TRUE(Grammar::FromSchema(schema.dump()).ok());
}

// A map's keys held to propertyNames (listed keys each at most once) and their count to
// minProperties / maxProperties: every object of up to three keys of five is whole exactly
// when its keys fit, and random walks write only such objects.
TEST(JsonSchemaTest, MapKeysAndTheirCount) {
  struct Case {
    std::string schema;
    std::function<bool(const std::string&)> key_ok;
    bool distinct;
    int min_keys, max_keys;
  };
  auto in = [](std::set<std::string> keys) {
    return [keys](const std::string& k) { return keys.count(k) > 0; };
  };
  auto lower = [](const std::string& k) {
    return !k.empty() && k.size() <= 2 &&
           std::all_of(k.begin(), k.end(), [](char c) { return c >= 'a' && c <= 'z'; });
  };
  auto any = [](const std::string&) { return true; };
  const std::vector<Case> cases = {
      {R"({"additionalProperties":{"type":"integer"},"propertyNames":{"enum":["a","b","ab"]}})",
       in({"a", "b", "ab"}), true, 0, 3},
      {R"({"type":"object","propertyNames":{"enum":["a","b","ab"]},"minProperties":1,
           "maxProperties":2})",
       in({"a", "b", "ab"}), true, 1, 2},
      {R"({"propertyNames":{"const":"ab"}})", in({"ab"}), true, 0, 1},
      {R"({"type":"object","propertyNames":{"pattern":"^[a-z]+$","maxLength":2}})", lower, false, 0,
       99},
      {R"({"type":"object","maxProperties":2})", any, false, 0, 2},
  };
  const std::vector<std::string> keys = {"a", "b", "ab", "abc", "B"};
  const std::vector<std::vector<int>> objects = Sequences(keys.size(), 3);
  std::mt19937_64 rng(37);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const auto g = Schema(c.schema);
    for (const std::vector<int>& o : objects) {
      std::string text = "{";
      bool keys_ok = true;
      for (size_t i = 0; i < o.size(); ++i) {
        text += (i ? ",\"" : "\"") + keys[o[i]] + "\":1";
        keys_ok = keys_ok && c.key_ok(keys[o[i]]);
      }
      text += "}";
      const int n = static_cast<int>(o.size());
      const bool distinct = std::set<int>(o.begin(), o.end()).size() == o.size();
      const bool fits = keys_ok && (!c.distinct || distinct) && n >= c.min_keys && n <= c.max_keys;
      EXPECT_EQ(Complete(g, text), fits) << text;
    }
    for (int i = 0; i < 200; ++i) {
      const auto doc = testing::RandomDocument(g, rng);
      ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
      const json parsed = json::parse(*doc);
      ASSERT_TRUE(parsed.is_object()) << *doc;
      int n = 0;
      for (const auto& [k, v] : parsed.items()) {
        EXPECT_TRUE(c.key_ok(k)) << *doc;
        ++n;
      }
      if (c.distinct) {
        EXPECT_TRUE(n >= c.min_keys && n <= c.max_keys) << *doc;
      }
      EXPECT_LE(n, c.max_keys) << *doc;
    }
  }
  // Keys of a format (a schema of only a format writes strings); listed keys with a space.
  EXPECT_TRUE(Complete(Schema(R"({"propertyNames":{"format":"date"}})"), R"({"2026-12-06":0})"));
  EXPECT_FALSE(Complete(Schema(R"({"propertyNames":{"format":"date"}})"), R"({"2026-13-06":0})"));
  const auto listed = Schema(R"({"propertyNames":{"enum":["a","b"]}})");
  EXPECT_TRUE(Complete(listed, R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(Complete(listed, R"({"a": 1, "a": 2})"));
}

// multipleOf (an integer) writes integers that are its multiples, within the bounds beside
// it, and every prefix alive still reaches one.
TEST(JsonSchemaTest, MultiplesHoldExactly) {
  struct Case {
    std::string schema;
    int64_t multiple, lo, hi;
  };
  const int64_t far = kMaxBoundMagnitude;
  const std::vector<Case> cases = {
      {R"({"type":"integer","multipleOf":3})", 3, -far, far},
      {R"({"type":"integer","multipleOf":7,"minimum":10,"maximum":100})", 7, 10, 100},
      {R"({"type":"number","multipleOf":5,"exclusiveMaximum":0})", 5, -far, -1},
      {R"({"type":"number","multipleOf":1,"minimum":-3,"maximum":3})", 1, -3, 3},
      {R"({"multipleOf":1000,"minimum":-2500,"exclusiveMaximum":2001})", 1000, -2500, 2000},
      {R"({"type":"integer","multipleOf":250.0,"exclusiveMinimum":999})", 250, 1000, far},
      {R"({"type":"integer","multipleOf":1e300})", far + 1, -far, far},
  };
  std::vector<std::string> texts = {"-0",
                                    "0",
                                    "-0.0",
                                    "0.0",
                                    "1e3",
                                    "-",
                                    "00",
                                    "03",
                                    "3.",
                                    "999999999999999",
                                    "-999999999999999",
                                    "1000000000000000"};
  for (int i = -3100; i <= 3100; ++i) texts.push_back(std::to_string(i));
  for (int i = -20; i <= 20; i += 3) texts.push_back(std::to_string(i) + ".5");
  std::mt19937_64 rng(23);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const auto g = Schema(c.schema);
    for (const std::string& text : texts) {
      const bool integral = !json::parse(text, nullptr, false).is_discarded() &&
                            text.find_first_of(".eE") == std::string::npos;
      const int64_t v = integral ? std::stoll(text) : 0;
      EXPECT_EQ(Complete(g, text), integral && v >= c.lo && v <= c.hi && v % c.multiple == 0)
          << text;
      ExpectPrefixesComplete(g, text, 4000);
    }
    for (int i = 0; i < 300; ++i) {
      const auto doc = testing::RandomDocument(g, rng);
      ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
      ASSERT_EQ(doc->find_first_of(".eE"), std::string::npos) << *doc;
      const int64_t v = std::stoll(*doc);
      EXPECT_TRUE(v >= c.lo && v <= c.hi && v % c.multiple == 0) << *doc;
    }
  }
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
    // With an enum long enough to be matched by runs (Node::ranged).
    json cities = json::array();
    for (int i = 0; i < 100; ++i) cities.push_back(absl::StrCat("c", i));
    const auto g = Schema(absl::StrCat(
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
        "n":{"type":"number"},"ok":{"type":"boolean"},"city":{"enum":)",
        cities.dump(), R"(}},"required":["name","ok"]})"));
    const std::string doc = R"({"name": "a\u00e9bcd", "n": -1.5e2, "ok": true, "city": "c42"})";
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
