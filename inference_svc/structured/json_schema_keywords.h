// The keywords of the JSON Schema subset and their readings, for the schema compiler
// (json_grammar.cc): which keywords annotate and which assert, formats' shapes, counts and
// bounds, and where a keyword that cannot be held is refused or, leniently, read past.
// Internal to kvfold::structured.
#ifndef KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_SCHEMA_KEYWORDS_H_
#define KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_SCHEMA_KEYWORDS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/structured/json_grammar.h"
#include "nlohmann/json.hpp"

namespace kvfold::structured::schema {

using json = nlohmann::ordered_json;

// InvalidArgument "schema at 'where': what" ('/' for the root).
absl::Status Bad(const std::string& where, const std::string& what);

// What a schema asks that this subset cannot hold. Strict (the default, and outside every
// scope): the schema is refused (Bad). Within a lenient scope: the keyword is read past as
// if absent, and named, with where it is in the scope, in `skipped` ("uniqueItems at
// '/tags'", "... in tools[1]" with the scope's label), for the caller to report.
struct Leniency {
  // At most this many are named, each in at most kMaxSkippedChars bytes (the names go into
  // an HTTP header); past them one last entry counts the rest.
  static constexpr int kMaxSkipped = 16;
  static constexpr size_t kMaxSkippedChars = 160;

  std::vector<LenientScope> scopes;  // one with pointer "": the whole schema
  // Lenient (`where` in a scope): records `keyword` at `where` and returns true (go on without it);
  // strict: false (refuse).
  bool Skip(const std::string& where, const std::string& keyword);
  // What was recorded, in the order met.
  std::vector<std::string> Skipped() const;

 private:
  std::vector<std::string> skipped_;
  int count_ = 0;
};

// Keywords that only annotate (JSON Schema 2020-12's meta-data, `format` as an annotation,
// the content keywords; OpenAPI's `discriminator`, which Pydantic writes beside a oneOf,
// `example`, `externalDocs`, and `nullable`, which JSON Schema validators do not read:
// held without it, a schema writes what both readings admit): read past. $defs /
// definitions hold schemas reached through $ref.
const std::set<std::string>& Annotations();
// The keywords held (json_grammar.cc, docs/structured-output.md).
const std::set<std::string>& Assertions();
// Whether value v is of JSON Schema type `type` (1.0 is an integer).
bool TypeMatches(const json& v, const std::string& type);

// The shape of a `format`'s strings: a pattern, and their most code points when the format
// bounds its length (-1: none).
struct FormatShape {
  std::string pattern;  // "": any string (the format only annotates)
  int max_length = -1;
};
FormatShape FormatPattern(const std::string& format);

// The values of a literals node as JSON Schema compares them: 1 and 1.0 are one (and one
// to nlohmann's ordering).
std::set<nlohmann::json> ValuesOf(const Node& n);
// A list of more than kMaxLiterals values is matched by runs (Node::ranged): sorted.
void RangeIfLong(Node* n);

// Keyword `key` of s, a count in [0, 2^20]; `fallback` when absent.
absl::StatusOr<int> Count(const json& s, const char* key, const std::string& where, int fallback);
// The [min, max] of keywords `min_key` and `max_key` (max -1: none).
absl::Status Bounds(const json& s, const char* min_key, const char* max_key,
                    const std::string& where, int* min, int* max);
// The numeric keywords of s into the bounds of number node *n; what cannot be held goes
// through *leniency (json_schema_keywords.cc).
absl::Status NumberBounds(const json& s, const std::string& where, Leniency* leniency, Node* n);

}  // namespace kvfold::structured::schema

#endif  // KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_SCHEMA_KEYWORDS_H_
