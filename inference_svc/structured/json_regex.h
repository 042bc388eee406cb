// The parse of a JSON Schema `pattern` (an ECMA-262 regular expression), which Pattern
// (json_pattern.h) compiles into an automaton. Internal to kvfold::structured.
//
// Quantifiers come out expanded into copies, stars, pluses and options (`x{2,4}` is x x
// x? x?), and a top-level alternative that does not start with ^ (end with $) gets any
// characters before (after) it, as JSON Schema matches a pattern anywhere in the string.
// Lookaheads stay nodes of their own (kLook), zero-width, their bodies parsed the same
// way; a `$` that does not end a top-level alternative is a lookahead whose body matches
// only the empty string.
//
// Classes are read so that what the automaton accepts matches under both ECMA-262 and
// Python's `re`: in a positive context (the pattern, a `(?=...)` body) a class is what
// both engines count as its members (\d: ASCII digits); in a negative one (a `(?!...)`
// body) what either counts, so that a string kept out by either engine is kept out.
#ifndef KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_REGEX_H_
#define KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_REGEX_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvfold::structured::regex {

// A class: sorted, disjoint, inclusive code point ranges.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

struct Re {
  enum Kind { kEmpty, kClass, kCat, kAlt, kStar, kPlus, kOpt, kLook } kind = kEmpty;
  Ranges ranges;          // kClass
  std::vector<Re> kids;   // kLook: one, the body, with any characters after it unless
                          // an alternative of it ends with $
  bool negative = false;  // kLook: (?!...)
  bool at_start = false;  // kLook: an alternative of its body starts with ^
  // Positions of the automaton: one per class and per lookahead (not its body's).
  int Leaves() const;
};

// InvalidArgument naming what is outside the subset and where: backreferences,
// lookbehind, a lookaround inside a lookaround, word boundaries, inline flags, ^ other
// than at the start of a top-level alternative or of a lookahead's, a '{' that is no
// quantifier, an empty class, groups nested more than 32 deep.
absl::StatusOr<Re> Parse(std::string_view source);

// Whether r holds a code point in [lo, hi].
bool Intersects(const Ranges& r, uint32_t lo, uint32_t hi);

}  // namespace kvfold::structured::regex

#endif  // KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_REGEX_H_
