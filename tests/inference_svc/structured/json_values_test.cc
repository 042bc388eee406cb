// Values held exactly: tuples, numeric bounds and multiples, lists of values short and
// long, sets (uniqueItems), maps' keys and counts, and oneOfs told apart by values or by a
// discriminating property.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/json_matcher.h"
#include "nlohmann/json.hpp"
#include "tests/inference_svc/structured/matcher_testing.h"
#include "tests/inference_svc/structured/random_document.h"

namespace kvfold::structured {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

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

// 300 random walks of g, an array schema: each ends (no dead end) and its items are
// distinct values to JSON Schema (0 and -0 are one); each array also goes to `check`.
void ExpectWalksOfDistinctItems(
    const std::shared_ptr<const Grammar>& g, std::mt19937_64& rng,
    const std::function<void(const json& items, const std::string& doc)>& check = nullptr) {
  for (int i = 0; i < 300; ++i) {
    const auto doc = testing::RandomDocument(g, rng);
    ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
    const json items = json::parse(*doc);
    ASSERT_TRUE(items.is_array()) << *doc;
    const std::set<json> distinct(items.begin(), items.end());
    EXPECT_EQ(distinct.size(), items.size()) << *doc;
    if (check) check(items, *doc);
  }
}

// uniqueItems over strings without a pattern (Pydantic's `set[str]`): every array of up to
// three items from texts that are seven spellings of five values (escapes are the
// characters they write) is whole exactly when its values are distinct and within the
// lengths; random walks write each value once and never find a dead end, even where a
// string's last character would make it one written before.
TEST(JsonSchemaTest, UniqueStrings) {
  struct Case {
    std::string schema;
    int max_length, max_items;
  };
  const std::vector<Case> cases = {
      {R"({"type":"array","items":{"type":"string"},"uniqueItems":true})", 99, 99},
      {R"({"type":"array","items":{"type":"string","maxLength":1},"uniqueItems":true})", 1, 99},
      {R"({"items":{"type":"string","maxLength":2,"minLength":1},"uniqueItems":true,
           "maxItems":2})",
       2, 2},
  };
  const std::vector<std::string> texts = {R"("")",       R"("a")", R"("b")",      R"("ab")",
                                          R"("\u0061")", R"("é")", R"("\u00e9b")"};
  const std::vector<std::vector<int>> arrays = Sequences(texts.size(), 3);
  std::mt19937_64 rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const auto g = Schema(c.schema);
    const int min_length = c.schema.find("minLength") != std::string::npos ? 1 : 0;
    for (const std::vector<int>& a : arrays) {
      std::string text = "[";
      std::set<std::string> values;
      bool lengths = true;
      for (size_t i = 0; i < a.size(); ++i) {
        text += (i ? "," : "") + texts[a[i]];
        const std::string v = json::parse(texts[a[i]]).get<std::string>();
        values.insert(v);
        const int64_t cps =
            std::count_if(v.begin(), v.end(), [](char ch) { return (ch & 0xC0) != 0x80; });
        lengths = lengths && cps >= min_length && cps <= c.max_length;
      }
      text += "]";
      const bool fits =
          lengths && values.size() == a.size() && static_cast<int>(a.size()) <= c.max_items;
      EXPECT_EQ(Complete(g, text), fits) << text;
    }
    ExpectWalksOfDistinctItems(g, rng);
  }
  // The character that would fill a string to maxLength as one written before is refused,
  // however it is spelled; another is taken.
  const auto one = Schema(R"({"items":{"type":"string","maxLength":2},"uniqueItems":true})");
  JsonMatcher m(one);
  ASSERT_TRUE(m.Advance(R"(["ab", "é", "a)"));
  EXPECT_FALSE(JsonMatcher(m).Advance("b"));
  EXPECT_FALSE(JsonMatcher(m).Advance(R"(\u0062)"));
  EXPECT_TRUE(JsonMatcher(m).Advance(R"(\u0063)"));
  EXPECT_TRUE(JsonMatcher(m).Advance(R"(")"));  // "a" is new
  ASSERT_TRUE(m.Advance("\", "));
  EXPECT_FALSE(JsonMatcher(m).Advance(R"("\u00e9")"));
  EXPECT_FALSE(JsonMatcher(m).Advance(R"("a")"));
  EXPECT_TRUE(JsonMatcher(m).Advance(R"("ba"])"));
  // Each array its own; a nested array's items are not its parent's.
  const auto nested = Schema(R"({"type":"array","items":{"type":"array",
      "items":{"type":"string"},"uniqueItems":true}})");
  EXPECT_TRUE(Complete(nested, R"([["a","b"],["b","a"],[]])"));
  EXPECT_FALSE(Complete(nested, R"([["a","b"],["c","c"]])"));
  // Strings of no character: one value, so one item at most.
  const auto empty = Schema(R"({"items":{"type":"string","maxLength":0},"uniqueItems":true})");
  EXPECT_TRUE(Complete(empty, R"([""])"));
  JsonMatcher after(empty);
  ASSERT_TRUE(after.Advance(R"(["")"));
  EXPECT_FALSE(JsonMatcher(after).Advance(","));
}

// uniqueItems over integers (Pydantic's `set[int]`, with bounds `set[conint(...)]`):
// every array of up to three items from six spellings of five values (0 and -0 are one)
// is whole exactly when its values are distinct (and, bounded, within the bounds and at
// most as many as the values); a digit after which none may follow (a 0, the fifteenth)
// may not repeat an item, nor a sign or digit that leads only to values written; random
// walks write each value once and never find a dead end.
TEST(JsonSchemaTest, UniqueIntegers) {
  const auto g = Schema(R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})");
  const std::vector<std::string> texts = {"0", "-0", "1", "-1", "10", "-10"};
  for (const std::vector<int>& a : Sequences(texts.size(), 3)) {
    std::string text = "[";
    std::set<int64_t> values;
    for (size_t i = 0; i < a.size(); ++i) {
      text += (i ? "," : "") + texts[a[i]];
      values.insert(std::stoll(texts[a[i]]));
    }
    text += "]";
    EXPECT_EQ(Complete(g, text), values.size() == a.size()) << text;
  }
  JsonMatcher m(g);
  ASSERT_TRUE(m.Advance("[0, 123456789012345, 12345678901234, "));
  EXPECT_FALSE(JsonMatcher(m).Advance("0"));
  EXPECT_FALSE(JsonMatcher(m).Advance("-0"));
  EXPECT_TRUE(JsonMatcher(m).Advance("-1"));
  EXPECT_FALSE(JsonMatcher(m).Advance("123456789012345"));
  EXPECT_TRUE(JsonMatcher(m).Advance("123456789012346"));
  EXPECT_TRUE(JsonMatcher(m).Advance("-123456789012345]"));
  EXPECT_FALSE(JsonMatcher(m).Advance("12345678901234]"));
  EXPECT_TRUE(JsonMatcher(m).Advance("1234567890123]"));
  // Between bounds: as many items as values at most, and a sign or digit that could only
  // lead to values written is refused.
  struct Bounded {
    std::string schema;
    int64_t lo, hi;
    int max_items;
  };
  const std::vector<Bounded> bounded = {
      {R"({"items":{"type":"integer","minimum":-2,"maximum":12},"uniqueItems":true})", -2, 12, 15},
      {R"({"items":{"type":"integer","minimum":0,"maximum":2},"uniqueItems":true})", 0, 2, 3},
      {R"({"items":{"type":"integer","exclusiveMinimum":9,"maximum":12},"uniqueItems":true,
           "maxItems":2})",
       10, 12, 2},
      {R"({"items":{"type":"integer","maximum":-5},"uniqueItems":true})", -kMaxBoundMagnitude, -5,
       99},
  };
  const std::vector<std::string> more = {"0", "-0", "1", "-1", "10", "-10", "12", "13", "2"};
  std::mt19937_64 rng(5);
  for (const Bounded& b : bounded) {
    SCOPED_TRACE(b.schema);
    const auto held = Schema(b.schema);
    for (const std::vector<int>& a : Sequences(more.size(), 3)) {
      std::string text = "[";
      std::set<int64_t> values;
      bool within = true;
      for (size_t i = 0; i < a.size(); ++i) {
        text += (i ? "," : "") + more[a[i]];
        const int64_t v = std::stoll(more[a[i]]);
        values.insert(v);
        within = within && v >= b.lo && v <= b.hi;
      }
      text += "]";
      const bool fits =
          within && values.size() == a.size() && static_cast<int>(a.size()) <= b.max_items;
      EXPECT_EQ(Complete(held, text), fits) << text;
    }
    ExpectWalksOfDistinctItems(held, rng, [&](const json& items, const std::string& doc) {
      for (const json& v : items) {
        EXPECT_TRUE(v.get<int64_t>() >= b.lo && v.get<int64_t>() <= b.hi) << doc;
      }
      EXPECT_LE(static_cast<int>(items.size()), b.max_items) << doc;
    });
  }
  const auto three = Schema(R"({"items":{"type":"integer","minimum":0,"maximum":2},
                                "uniqueItems":true})");
  JsonMatcher last(three);
  ASSERT_TRUE(last.Advance("[0, 1, "));
  EXPECT_FALSE(JsonMatcher(last).Advance("0"));
  EXPECT_FALSE(JsonMatcher(last).Advance("-"));  // -0 is 0
  EXPECT_FALSE(JsonMatcher(last).Advance("1"));
  EXPECT_TRUE(JsonMatcher(last).Advance("2]"));
  EXPECT_FALSE(JsonMatcher(last).Advance("2,"));  // no value left
  const auto teens = Schema(R"({"items":{"type":"integer","minimum":10,"maximum":12},
                                "uniqueItems":true})");
  JsonMatcher t(teens);
  ASSERT_TRUE(t.Advance("[10, 12, 1"));
  EXPECT_FALSE(JsonMatcher(t).Advance("0"));
  EXPECT_FALSE(JsonMatcher(t).Advance("2"));
  EXPECT_TRUE(JsonMatcher(t).Advance("1]"));
  ExpectWalksOfDistinctItems(g, rng);
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

// unevaluatedProperties / unevaluatedItems with no in-place applicator beside them hold what
// additionalProperties / the items past the places would; annotations of Draft 2020-12
// (contentEncoding, ...) and OpenAPI (nullable, example) are read past, nullable writing
// what both readings admit (no null).
TEST(JsonSchemaTest, UnevaluatedKeywordsAndAnnotations) {
  const auto closed = Schema(
      R"({"type":"object","properties":{"a":{"type":"integer"}},"unevaluatedProperties":false})");
  EXPECT_TRUE(Complete(closed, R"({"a":1})"));
  EXPECT_FALSE(Complete(closed, R"({"a":1,"b":2})"));
  // A map (no properties): its values of the schema.
  const auto typed = Schema(R"({"type":"object","unevaluatedProperties":{"type":"integer"}})");
  EXPECT_TRUE(Complete(typed, R"({"a":1,"b":2})"));
  EXPECT_FALSE(Complete(typed, R"({"b":"x"})"));
  // Beside additionalProperties nothing is left unevaluated: its map, not {}.
  const auto beside = Schema(
      R"({"type":"object","additionalProperties":{"type":"string"},"unevaluatedProperties":false})");
  EXPECT_TRUE(Complete(beside, R"({"b":"x"})"));
  const auto tuple =
      Schema(R"({"type":"array","prefixItems":[{"type":"string"}],"unevaluatedItems":false})");
  EXPECT_TRUE(Complete(tuple, R"(["x"])"));
  EXPECT_FALSE(Complete(tuple, R"(["x",1])"));
  const auto draft7 = Schema(
      R"({"type":"array","items":[{"type":"string"}],"unevaluatedItems":{"type":"integer"}})");
  EXPECT_TRUE(Complete(draft7, R"(["x",1,2])"));
  EXPECT_FALSE(Complete(draft7, R"(["x","y"])"));
  for (const char* refused :
       {R"({"allOf":[{"properties":{"a":{}}}],"unevaluatedProperties":false})",
        R"({"$ref":"#/$defs/A","unevaluatedItems":false,"$defs":{"A":{}}})"}) {
    auto g = Grammar::FromSchema(refused);
    ASSERT_FALSE(g.ok()) << refused;
    EXPECT_NE(g.status().message().find("beside '"), std::string::npos) << g.status();
  }
  const auto annotated = Schema(
      R"({"type":"object","properties":{"n":{"type":"string","nullable":true,"example":"x"},
          "blob":{"type":"string","contentEncoding":"base64","contentMediaType":"image/png"}},
          "required":["n"],"externalDocs":{"url":"https://example.com"}})");
  EXPECT_TRUE(Complete(annotated, R"({"n":"x","blob":"aGk="})"));
  EXPECT_FALSE(Complete(annotated, R"({"n":null})"));
}

// Lenient: what the subset cannot hold is read past and named, with where it is, in the
// order met; the rest holds as strictly. The same schema is refused when strict, and what
// is no schema is refused leniently too.
TEST(JsonSchemaTest, LenientSchemasHoldTheRestAndNameWhatTheySkip) {
  const std::string schema = R"j({"type":"object","properties":{
      "tags":{"type":"array","items":{"type":"string","maxLength":3},"uniqueItems":true,
              "contains":{"const":"a"}},
      "counts":{"type":"array","items":{"type":"number"},"uniqueItems":true},
      "price":{"type":"number","multipleOf":0.01,"maximum":9.5,"minimum":0},
      "code":{"type":"string","pattern":"(?<=a)b","maxLength":4},
      "pick":{"oneOf":[{"type":"integer"},{"type":"number"}]},
      "both":{"allOf":[{"type":"integer","maximum":5},{"minimum":3}]},
      "color":{"enum":["red","green"],"minLength":4},
      "x":{"not":{"type":"null"}}},
    "required":["tags","price","code","pick","both","color"],
    "propertyNames":{"maxLength":5}})j";
  auto strict = Grammar::FromSchema(schema);
  ASSERT_FALSE(strict.ok());
  auto g = Grammar::FromSchema(schema, /*compact=*/true, /*lenient=*/true);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->skipped(),
            (std::vector<std::string>{
                "propertyNames at '/'", "contains at '/properties/tags'",
                "uniqueItems at '/properties/counts'", "maximum at '/properties/price'",
                "multipleOf at '/properties/price'", "pattern at '/properties/code'",
                "oneOf (held as anyOf) at '/properties/pick'",
                "allOf after its first schema at '/properties/both'",
                "minLength beside enum / const at '/properties/color'", "not at '/properties/x'"}));
  // What is held still is (the tags' uniqueItems too).
  EXPECT_TRUE(Complete(*g, R"({"tags":["ab","ba"],"counts":[1,1],"price":12.5,"code":"zz",)"
                           R"("pick":1.5,"both":4,"color":"red"})"));
  EXPECT_FALSE(Complete(*g, R"({"tags":["ab","ab"],"price":12.5,"code":"zz","pick":1.5,)"
                            R"("both":4,"color":"red"})"));
  EXPECT_FALSE(Complete(*g, R"({"tags":["abcd"],"price":1,"code":"z","pick":1,"both":4,)"
                            R"("color":"red"})"));  // an item past maxLength
  EXPECT_FALSE(Complete(*g, R"({"tags":[],"price":-1,"code":"z","pick":1,"both":4,)"
                            R"("color":"red"})"));  // under minimum
  EXPECT_FALSE(Complete(*g, R"({"tags":[],"price":1,"code":"zzzzz","pick":1,"both":4,)"
                            R"("color":"red"})"));  // code past maxLength
  EXPECT_FALSE(Complete(*g, R"({"tags":[],"price":1,"code":"z","pick":1,"both":6,)"
                            R"("color":"red"})"));  // the first allOf schema's maximum
  EXPECT_FALSE(Complete(*g, R"({"tags":[],"price":1,"code":"z","pick":1,"both":4,)"
                            R"("color":"blue"})"));
  std::mt19937_64 rng(31);
  for (int i = 0; i < 200; ++i) {
    const auto doc = testing::RandomDocument(*g, rng);
    ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
    const json v = json::parse(*doc);
    for (const json& t : v["tags"]) {
      const std::string text = t.get<std::string>();  // code points: no continuation bytes
      EXPECT_LE(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }),
                3)
          << *doc;
    }
    EXPECT_GE(v["price"].get<double>(), 0) << *doc;
    EXPECT_TRUE(v["both"].is_number_integer() && v["both"].get<int64_t>() <= 5) << *doc;
  }
  // Named at most 16 times (they go into a header), each in at most 160 bytes.
  json many = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 40; ++i) {
    many["properties"][absl::StrCat(std::string(i == 0 ? 300 : 1, 'k'), i)] = {{"not", {}}};
  }
  auto capped = Grammar::FromSchema(many.dump(), true, true);
  ASSERT_TRUE(capped.ok()) << capped.status();
  ASSERT_EQ((*capped)->skipped().size(), 17u);
  EXPECT_EQ((*capped)->skipped().back(), "and 24 more");
  for (const std::string& named : (*capped)->skipped()) EXPECT_LE(named.size(), 160u) << named;
  // A format whose shape is shorter than minLength: strictly refused, leniently the string
  // keeps its lengths.
  const std::string long_email = R"({"type":"string","format":"email","minLength":300})";
  EXPECT_FALSE(Grammar::FromSchema(long_email).ok());
  auto email = Grammar::FromSchema(long_email, true, true);
  ASSERT_TRUE(email.ok()) << email.status();
  EXPECT_EQ((*email)->skipped(), std::vector<std::string>{"format at '/'"});
  EXPECT_TRUE(Complete(*email, json(std::string(300, 'x')).dump()));
  EXPECT_FALSE(Complete(*email, json(std::string(299, 'x')).dump()));
  // Held whole, nothing is skipped; not a schema, refused either way.
  auto whole = Grammar::FromSchema(R"({"type":"string","maxLength":2})", true, true);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE((*whole)->skipped().empty());
  for (const char* bad : {R"({"type":"strin"})", R"({"minLength":-1})", R"({"enum":[]})",
                          R"({"type":"integer","minimum":5,"maximum":1})", "[1]"}) {
    EXPECT_FALSE(Grammar::FromSchema(bad, true, true).ok()) << bad;
  }
}

TEST(JsonSchemaTest, LenientScopesReadPastOnlyWithinThem) {
  // Two subschemas alike but for where they are; only the scopes given are lenient, and a
  // reference's target is read as where it is.
  const std::string schema = R"j({"type":"object","properties":{
      "a":{"type":"array","items":{"type":"string"},"contains":{"const":"x"}},
      "ab":{"type":"array","items":{"$ref":"#/properties/ab/$defs/tag"},"contains":{"const":"x"},
            "$defs":{"tag":{"type":"string","maxLength":2,"not":{"const":""}}}},
      "c":{"$ref":"#/$defs/loose"}},
    "$defs":{"loose":{"type":"integer","not":{"const":0}}}})j";
  const auto skipped = [&](std::vector<LenientScope> scopes) -> absl::StatusOr<std::string> {
    auto g = Grammar::FromSchema(schema, true, std::move(scopes));
    if (!g.ok()) return g.status();
    return absl::StrJoin((*g)->skipped(), "; ");
  };
  // "/properties/a" is not a prefix of "/properties/ab" as JSON pointers.
  auto only_a = skipped({{.pointer = "/properties/a", .label = ""}});
  ASSERT_FALSE(only_a.ok());
  EXPECT_THAT(std::string(only_a.status().message()),
              HasSubstr("'/properties/ab': keyword 'contains'"));
  auto ab = skipped({{.pointer = "/properties/ab", .label = "the tags"}});
  ASSERT_FALSE(ab.ok());
  EXPECT_THAT(std::string(ab.status().message()), HasSubstr("'/properties/a': keyword 'contains'"));
  auto all = skipped({{.pointer = "/properties/ab", .label = "the tags"},
                      {.pointer = "/properties/a", .label = ""},
                      {.pointer = "/$defs/loose", .label = "loose"}});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all,
            "contains at '/'; contains at '/' in the tags; not at '/$defs/tag' in the tags; "
            "not at '/' in loose");
  // One scope of the whole schema is the lenient schema.
  auto whole = Grammar::FromSchema(schema, true, /*lenient=*/true);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(absl::StrJoin((*whole)->skipped(), "; "),
            "contains at '/properties/a'; contains at '/properties/ab'; not at "
            "'/properties/ab/$defs/tag'; not at '/$defs/loose'");
  auto held =
      Grammar::FromSchema(schema, true, std::vector<LenientScope>{{.pointer = "", .label = ""}});
  ASSERT_TRUE(held.ok());
  EXPECT_EQ((*held)->skipped(), (*whole)->skipped());
}

}  // namespace
}  // namespace kvfold::structured
