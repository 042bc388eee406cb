// The JSON a constrained turn may write: any JSON object (OpenAI's response_format
// `json_object`), or the documents of a JSON Schema (`json_schema`), compiled into a small
// graph of value nodes that JsonMatcher (json_matcher.h) walks byte by byte.
//
// What a schema may say is a documented subset (docs/structured-output.md): every document
// the grammar lets through is valid under the schema, and a keyword outside the subset is
// refused, never ignored.
#ifndef KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_GRAMMAR_H_
#define KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_GRAMMAR_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "inference_svc/structured/json_pattern.h"

namespace kvfold::structured {

enum class NodeKind : uint8_t {
  kAny,       // any JSON value
  kObject,    // an object: the listed properties, or any keys (free_keys)
  kArray,     // an array of `items`
  kString,    // a string of [min_length, max_length] code points
  kNumber,    // a JSON number
  kInteger,   // a JSON number without fraction or exponent
  kLiterals,  // one of `literals` (enum, const, booleans, null)
  kAnyOf,     // one of `alternatives`
};

struct Property {
  std::string key;  // as written: a JSON string, quotes included
  int value = 0;    // node
  bool required = false;
};

struct Node {
  NodeKind kind = NodeKind::kAny;
  // kObject: the properties, written in this order (optional ones may be left out);
  // free_keys: string keys instead (a map), each value a `values` node.
  std::vector<Property> properties;
  bool free_keys = false;
  int values = 0;
  // free_keys: each key of node `keys` (-1: any string; propertyNames: a kString node, or
  // a kLiterals node of strings, each key then written at most once), and between
  // min_properties and max_properties of them (-1: no bound).
  int keys = -1;
  int min_properties = 0;
  int max_properties = -1;
  // kArray: item i is of node prefix_items[i] (a tuple's places: prefixItems, or the
  // draft 4-2019 `items` list), every later one of `items`.
  std::vector<int> prefix_items;
  int items = 0;
  int min_items = 0;
  int max_items = -1;  // -1: no bound
  // uniqueItems: every item is of a kLiterals `items` node, each literal at most once
  // (max_items at most their count), or of a kString node without a pattern or a kInteger
  // node without multiples (bounded: max_items at most the values between the bounds),
  // each value at most once (strings compared by hash, integers by value;
  // json_matcher.cc).
  bool unique_items = false;
  // kString, in code points (an escape counts as one).
  int min_length = 0;
  int max_length = -1;  // -1: no bound
  // kString: the characters match `pattern` (json_pattern.h); null: any.
  std::shared_ptr<const Pattern> pattern;
  // kNumber, kInteger with minimum / maximum / exclusiveMinimum / exclusiveMaximum or
  // multipleOf (`bounded`): the value lies in [min_value, max_value], an end left out when its
  // flag is set. Integer bounds of magnitude at most kMaxBoundMagnitude (a farther one
  // is that far: no value of 15 digits reaches past it); a bounded number is written with at most
  // kMaxBoundedDigits digits and no exponent, so a bound decides it exactly as it
  // decides the double a parser reads (docs/structured-output.md, "Numeric bounds").
  bool bounded = false;
  int64_t min_value = 0;
  int64_t max_value = 0;
  bool min_exclusive = false;
  bool max_exclusive = false;
  // kNumber, kInteger with `multipleOf` (bounded then too): the value is a multiple of this
  // integer, written as an integer (0: any value).
  int64_t multiple_of = 0;
  // kLiterals: each a serialized JSON value (a raw text for a choice); kAnyOf: nodes.
  // More than kMaxLiterals (`ranged`): sorted by their bytes, so the literals that share
  // a prefix are a run, and a match keeps the run's ends instead of a set of candidates.
  std::vector<std::string> literals;
  bool ranged = false;
  std::vector<int> alternatives;
};

// Bounds every constrained document obeys, whatever the schema (a model held to JSON
// cannot write forever inside one token run): whitespace runs, digits, nesting.
inline constexpr int kMaxWhitespaceRun = 16;  // bytes of whitespace in a row (not compact)
inline constexpr int kMaxIntegerDigits = 15;  // before the point (exact in a double)
inline constexpr int kMaxFractionDigits = 15;
inline constexpr int kMaxExponentDigits = 2;  // 1e99 at most: no parser overflows
inline constexpr int kMaxDepth = 32;          // nested objects and arrays
// A bounded number's digits, integer and fraction parts together, and the farthest bound.
inline constexpr int kMaxBoundedDigits = 15;
inline constexpr int64_t kMaxBoundMagnitude = 999'999'999'999'999;  // 10^15 - 1

// Whether some multiple of m lies in [lo, hi] (m > 0; |lo|, |hi|, m at most about 10^15).
inline bool MultipleWithin(int64_t lo, int64_t hi, int64_t m) {
  if (lo > hi) return false;
  int64_t q = lo / m;  // towards zero: then up to the first multiple at or above lo
  if (q * m < lo) ++q;
  return q * m <= hi;
}

// Most properties of one object, and most values of a list whose members are a set of
// candidates (a 64-bit word: uniqueItems' items, a map's listed keys); a longer list of
// values (an enum, a choice) is matched by runs, up to kMaxValues.
inline constexpr int kMaxProperties = 64;
inline constexpr int kMaxLiterals = 64;
inline constexpr int kMaxValues = 4096;
// The most memory a schema's compiled patterns (and formats) take together: a pattern's
// tables are a few KiB, so a schema of many short patterns would otherwise take hundreds
// of times its size (Pattern::MemoryBytes).
inline constexpr size_t kMaxSchemaPatternBytes = size_t{64} << 20;

// Literals [lo, hi) of a ranged node, sorted by their bytes: the run of those longer than
// `at` bytes whose byte `at` is c.
inline std::pair<uint32_t, uint32_t> NarrowRun(const std::vector<std::string>& literals,
                                               uint32_t lo, uint32_t hi, size_t at, uint8_t c) {
  auto byte = [at](const std::string& l) {
    return l.size() > at ? static_cast<int>(static_cast<uint8_t>(l[at])) : -1;
  };
  const auto begin = literals.begin() + lo, end = literals.begin() + hi;
  const auto first =
      std::partition_point(begin, end, [&](const std::string& l) { return byte(l) < c; });
  const auto last =
      std::partition_point(first, end, [&](const std::string& l) { return byte(l) <= c; });
  return {static_cast<uint32_t>(first - literals.begin()),
          static_cast<uint32_t>(last - literals.begin())};
}
// Most alternatives one value may open at once (anyOf within anyOf counted out), and most
// parse stacks a matcher keeps at once: a schema's ambiguity costs bounded work a byte.
inline constexpr int kMaxAlternatives = 64;
inline constexpr int kMaxStacks = 64;
// Most values a oneOf's discriminator check compares, over all candidate properties.
inline constexpr int64_t kMaxDiscriminatorValues = int64_t{1} << 20;

// A part of a schema read leniently: the subschema at JSON pointer `pointer` ("" = the
// whole schema) and all it holds, $ref targets by where they are. What is read past there
// is named relative to `pointer`, followed by " in " and `label` when one is given.
struct LenientScope {
  std::string pointer;
  std::string label;
};

class Grammar {
 public:
  // Nodes 0..5 of every grammar: any value, an object of any keys and values, an array of
  // any values, the literals true/false/null, any string, any number.
  static constexpr int kAnyValue = 0;
  static constexpr int kAnyObject = 1;
  static constexpr int kAnyArray = 2;
  static constexpr int kAnyLiteral = 3;
  static constexpr int kAnyString = 4;
  static constexpr int kAnyNumber = 5;

  // Compact documents admit whitespace only as one space after a ':' or ',' (what
  // `json.dumps` writes) and before the document: a model held to JSON cannot spend its
  // tokens on blank lines.
  // Otherwise any JSON whitespace, in runs of at most kMaxWhitespaceRun bytes.
  // Any JSON object.
  static std::shared_ptr<const Grammar> JsonObject(bool compact = true);
  // The documents of `schema` (JSON text). INVALID_ARGUMENT when it is not JSON, not a
  // schema, or uses a keyword outside the subset; the message names the keyword and
  // where it is (a JSON pointer into the schema). `lenient`: a keyword the subset cannot
  // hold (docs/structured-output.md, "Lenient schemas") is read past instead, and named in
  // skipped(); what is not a schema is refused all the same.
  static absl::StatusOr<std::shared_ptr<const Grammar>> FromSchema(std::string_view schema,
                                                                   bool compact = true,
                                                                   bool lenient = false);
  // The same, lenient only in `scopes` (a tool whose `strict` is false among strict ones).
  static absl::StatusOr<std::shared_ptr<const Grammar>> FromSchema(
      std::string_view schema, bool compact, std::vector<LenientScope> scopes);
  // Exactly one of `choices` (raw text, not JSON; vLLM's guided_choice), nothing before
  // or after it. INVALID_ARGUMENT for none, more than kMaxValues, an empty or a repeated
  // one.
  static absl::StatusOr<std::shared_ptr<const Grammar>> Choice(
      const std::vector<std::string>& choices);

  const Node& node(int i) const { return nodes_[i]; }
  int root() const { return root_; }
  // With FromSchema(..., lenient): the keywords read past, each with where it is
  // ("uniqueItems at '/tags'"), in the order met; empty when all are held.
  const std::vector<std::string>& skipped() const { return skipped_; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  bool compact() const { return compact_; }
  // Whether one space may come before the document (compact JSON documents).
  bool leading_space() const { return leading_space_; }

 private:
  friend class SchemaCompiler;
  Grammar();
  std::vector<Node> nodes_;
  int root_ = 0;
  bool compact_ = true;
  std::vector<std::string> skipped_;
  bool leading_space_ = true;
};

}  // namespace kvfold::structured

#endif  // KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_GRAMMAR_H_
