// Patterns and formats: the position automaton against std::regex and Python-compatible
// readings, length bounds beside a pattern, code points, and the formats held to shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iterator>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/json_matcher.h"
#include "nlohmann/json.hpp"
#include "tests/inference_svc/structured/matcher_testing.h"
#include "tests/inference_svc/structured/random_document.h"

namespace kvfold::structured {
namespace {

using json = nlohmann::json;

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

// Whether random walks of a pattern's strings end in time: it is anchored at its start and
// has no top-level alternative (random bytes seldom write what an unanchored one looks for).
bool Walkable(const std::string& pattern) {
  int depth = 0;
  for (char ch : pattern) {
    depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
    if (ch == '|' && depth == 0) return false;
  }
  return pattern.front() == '^';
}

// The grammar of strings held to `pattern`.
std::shared_ptr<const Grammar> PatternSchema(const std::string& pattern) {
  return Schema(json{{"type", "string"}, {"pattern", pattern}}.dump());
}

// Each of `strings`, written as a JSON string, is a whole document of g exactly when it fits.
void ExpectDocumentsExactly(const std::shared_ptr<const Grammar>& g,
                            const std::vector<std::string>& strings,
                            const std::function<bool(const std::string&)>& fits) {
  for (const std::string& text : strings) {
    const std::string doc = json(text).dump();
    ASSERT_EQ(Complete(g, doc), fits(text)) << doc;
  }
}

// Random walks of g's documents (`walks` of them) never meet a dead end, and each string
// they write (but those holding a NUL, which std::regex stops at) is one `re` finds.
void ExpectWalksMatch(const std::shared_ptr<const Grammar>& g, const std::regex& re,
                      std::mt19937_64& rng, int walks) {
  for (int i = 0; i < walks; ++i) {
    const auto doc = testing::RandomDocument(g, rng);
    ASSERT_TRUE(doc.has_value()) << "a random walk found no way to end";
    const std::string text = json::parse(*doc).get<std::string>();
    if (std::all_of(text.begin(), text.end(), [](char ch) { return ch > 0; })) {
      EXPECT_TRUE(std::regex_search(text, re)) << *doc;
    }
  }
}

// `pattern` against std::regex's ECMAScript search: each of `strings` is a whole document
// exactly where the regex finds a match, and 200 random walks (of a Walkable pattern,
// seeded with `seed`) match. Returns the pattern's grammar.
std::shared_ptr<const Grammar> ExpectAsStdRegex(const std::string& pattern,
                                                const std::vector<std::string>& strings,
                                                uint64_t seed) {
  const auto g = PatternSchema(pattern);
  const std::regex re(pattern, std::regex::ECMAScript);
  ExpectDocumentsExactly(g, strings,
                         [&](const std::string& t) { return std::regex_search(t, re); });
  std::mt19937_64 rng(seed);
  if (Walkable(pattern)) ExpectWalksMatch(g, re, rng, 200);
  return g;
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
    const auto g = ExpectAsStdRegex(pattern, strings, 5);
    // The same characters escaped, and a non-ASCII one through each of its bytes.
    const std::regex re(pattern, std::regex::ECMAScript);
    EXPECT_EQ(Complete(g, "\"\\u0061\\u0062\""), std::regex_search("ab", re));
    EXPECT_EQ(Complete(g, "\"\\\"\""), std::regex_search("\"", re));
  }
}

// Random patterns (every third with length bounds): each compiles or is refused with a
// message, and one std::regex also takes matches exactly the strings std::regex finds it
// in, within the bounds (every string of up to three characters of a small alphabet).
TEST(JsonSchemaTest, RandomPatternsAgreeWithStdRegex) {
  const std::string pieces[] = {"(",   ")",     "|",   "(?:",  "^",    "[",     "]", "\\",
                                "(?=", "(?!",   "$",   "\\.",  "{2}",  "{0,}",  "*", "+",
                                "?",   "{1,2}", "a",   "b",    "0",    "-",     ".", "\\d",
                                "\\w", "\\s",   "\\D", "[ab]", "[^a]", "[a-z0]"};
  const std::vector<std::string> strings = AllStrings("ab0- .", 3);
  std::mt19937_64 rng(11);
  auto draw = [&](size_t pieces_from, int most) {
    std::string text;
    for (int k = 0, n = 1 + static_cast<int>(rng() % most); k < n; ++k) {
      text += pieces[pieces_from + rng() % (std::size(pieces) - pieces_from)];
    }
    return text;
  };
  int compared = 0, looked = 0;  // and of them with lookaheads
  for (int i = 0; i < 6000; ++i) {
    // Pieces at random; past 3,000, pieces of classes and quantifiers around a lookahead of
    // them, which random parentheses seldom close.
    std::string pattern = draw(0, 7);
    if (i >= 3000) {
      const size_t simple = 19;  // the last of `pieces`, from "\\.": quantifiers, classes
      pattern = std::string(rng() % 2 ? "^" : "") + draw(std::size(pieces) - simple, 2) +
                (rng() % 2 ? "(?=" : "(?!") + (rng() % 5 == 0 ? "^" : "") +
                draw(std::size(pieces) - simple, 3) + (rng() % 2 ? "$)" : ")") +
                draw(std::size(pieces) - simple, 3);
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
      // Bounds refused as unmet, or a pattern refused as matching nothing: no short
      // string fits either.
      if (regex_ok && (g.status().message().find("no match has a length") != std::string::npos ||
                       g.status().message().find("no string matches") != std::string::npos)) {
        EXPECT_TRUE(std::none_of(strings.begin(), strings.end(), fits));
      }
      continue;
    }
    if (!regex_ok) continue;
    ++compared;
    looked += pattern.find("(?=") != std::string::npos || pattern.find("(?!") != std::string::npos;
    ExpectDocumentsExactly(*g, strings, fits);
  }
  EXPECT_GT(compared, 500);
  EXPECT_GT(looked, 50);
  std::printf("%d patterns compared, %d with lookaheads\n", compared, looked);
}

// minLength / maxLength with a pattern: whole documents exactly when both hold (every
// string of up to five characters), random walks never stuck (the length bounds steer an
// unanchored pattern into its match in time), and bounds no match meets refused.
TEST(JsonSchemaTest, PatternsWithLengthBounds) {
  const std::vector<std::string> strings = AllStrings("ab0-", 5);
  int refused = 0;
  for (const std::string pattern : {"ab", "^(ab)*$", "^a?b*$", "[ab]0", "^.{2,}$", "^\\d+-?$",
                                    "^(?=.*0)(?!b)[ab0-]*$", "a(?!b)", "(?=0)0|a$-"}) {
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
      ExpectDocumentsExactly(*g, strings, fits);
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

// Lookaheads, and '$' inside a pattern, against std::regex's ECMAScript search: every
// string of up to four characters of a small alphabet is a whole document exactly when
// the pattern matches it; random walks never reach a dead end and write what it matches.
// Among them Pydantic's patterns for a Decimal (as it writes them for a bare Decimal and,
// with smaller digit counts, for max_digits / decimal_places); its pattern for 5 digits
// with 12 decimals compiles too and its walks write decimals.
TEST(JsonSchemaTest, LookaheadsMatchAsEcmaScriptSearches) {
  const std::string decimal = "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$";
  const std::vector<std::string> patterns = {
      decimal,
      "^(?!^[-+.]*$)[+-]?0*(?:\\d{0,2}|(?=[\\d.]{1,3}0*$)\\d{0,2}\\.\\d{0,1}0*$)",
      "^(?=.*a)(?=.*0).{0,4}$",
      "^(?!.*--)[a0-]+$",
      "^(?!a|-)..$",
      "(?=a0)a",
      "^(a|0$)-?",
      "^(?!0+$)\\d{1,3}$",
      "^(?=(a|-)*$).(?!-)",
      "a(?!0)|^-(?=.$)",
      "^(?!.$)(?!..$)[^a]*$",
      "^(?=.*\\d)(?=.*a)(?!.*-).{2,4}$"};
  const std::vector<std::string> strings = AllStrings("+-.019a", 4);
  for (const std::string& pattern : patterns) {
    SCOPED_TRACE(pattern);
    ExpectAsStdRegex(pattern, strings, 7);
  }
  const std::string pydantic =
      "^(?!^[-+.]*$)[+-]?0*(?:\\d{0,5}|(?=[\\d.]{1,18}0*$)\\d{0,5}\\.\\d{0,12}0*$)";
  const auto g = Schema(json{{"type", "string"}, {"pattern", pydantic}, {"maxLength", 24}}.dump());
  const std::regex re(pydantic, std::regex::ECMAScript);
  EXPECT_TRUE(Complete(g, "\"-00012345.123456789012\""));
  EXPECT_FALSE(Complete(g, "\"+.\""));
  std::mt19937_64 rng(9);
  ExpectWalksMatch(g, re, rng, 200);
  // A password rule: compiled within its bounds, its walks meet it.
  const std::string password = "^(?=.*\\d)(?=.*[a-z])(?=.*[A-Z])(?!.*\\s).{8,32}$";
  const auto pg = PatternSchema(password);
  const std::regex password_re(password, std::regex::ECMAScript);
  ExpectWalksMatch(pg, password_re, rng, 100);
  // Where the engines differ, a negative lookahead keeps out what either matches: Python's
  // '$' before a final line feed, its '\d' of other scripts, its '.' of '\r'.
  auto complete = [](const std::string& pattern, const std::string& doc) {
    return Complete(PatternSchema(pattern), doc);
  };
  EXPECT_FALSE(complete("^(?!a$)[a\\n]*$", "\"a\\n\""));
  EXPECT_TRUE(complete("^(?!a$)[a\\n]*$", "\"a\\na\""));
  EXPECT_FALSE(complete("^(?!\\d).$", "\"\xD9\xA1\""));  // U+0661, a digit to Python
  EXPECT_TRUE(complete("^(?!\\d).$", "\"a\""));
  EXPECT_FALSE(complete("^(?!.)\\r?$", "\"\\r\""));
  EXPECT_TRUE(complete("^(?!.)\\r?$", "\"\""));
  // A positive lookahead holds to what both match.
  EXPECT_FALSE(complete("^(?=\\d).$", "\"\xD9\xA1\""));
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
      {"uri", "https://api.example.com:8443/v1/items;x=1?q=a+b&r=(2)#top", true},
      {"uri", "http://localhost", true},
      {"uri", "http://a.b/c/d/", true},
      {"uri", "not a uri", false},
      {"uri", "ftp://example.com", false},  // http and https only
      {"uri", "https://exa mple.com", false},
      {"uri", "https://-a.example", false},
      {"uri", "https://example.com:0", false},
      {"uri", "https://example.com/%20", false},  // no percent-escapes
      {"uri", "https://example.com/a b", false},
      {"uri-reference", "not a uri", true},  // an annotation
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
  // Pydantic's HttpUrl: maxLength 2083 beside the shape, held to 1024 characters.
  const auto url = Schema(R"({"type":"string","format":"uri","minLength":1,"maxLength":2083})");
  EXPECT_TRUE(Complete(url, json("https://e.io/" + std::string(1011, 'a')).dump()));
  EXPECT_FALSE(Complete(url, json("https://e.io/" + std::string(1012, 'a')).dump()));
}

// Characters past ASCII are code points to a pattern, raw or escaped; the shorthands keep
// to what ECMA-262 and Python both count.
TEST(JsonSchemaTest, PatternsTakeCodePoints) {
  auto complete = [](const std::string& pattern, const std::string& doc) {
    return Complete(PatternSchema(pattern), doc);
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

}  // namespace
}  // namespace kvfold::structured
