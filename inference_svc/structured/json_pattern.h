// A JSON Schema `pattern` (an ECMA-262 regular expression) as a position automaton over
// code points, for the matcher to hold a string's characters to it one at a time.
//
// The automaton is Glushkov's: one position per character class of the expression (a
// quantifier's copies each their own: `x{2,4}` is four, `x{2,}` two, the second
// repeating), so a state is a set of positions, one 64-bit word,
// with no epsilon moves. JSON Schema matches a pattern anywhere in the string: a pattern
// (a top-level alternative of it) that does not start with ^ (end with $) may have any
// characters before (after) its match. Every position of the automaton lies on a path to acceptance
// and no class is empty, so a state that is not empty can always be completed: holding each
// character to a non-empty next state never leads a string into a dead end.
//
// Character shorthands are read so that a string the automaton accepts matches under
// both ECMA-262 and Python's `re` (which Python's `jsonschema` uses): \d, \w and \s in
// a positive class are their ASCII members, which both count; \D, \W, \S and negated
// classes leave out the members either one counts (\D, \W: every non-ASCII character),
// and `.` leaves out every line terminator of either (\n, \r, U+2028, U+2029).
//
// Lookaheads (`(?=...)`, `(?!...)`, and a `$` that does not end a top-level alternative)
// are zero-width positions: a pattern with them is compiled, by the product of its
// automaton with its lookaheads' bodies' automata, into a deterministic automaton whose
// states that cannot reach a match are dropped, and a state is then its number. That
// automaton is built under a bound of states and work; a pattern past it is refused.
#ifndef KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_PATTERN_H_
#define KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_PATTERN_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvfold::structured {
namespace regex {
struct Re;
}  // namespace regex

// Most positions (character classes after quantifiers are expanded) of one pattern.
inline constexpr int kMaxPatternPositions = 63;
// Most minLength / maxLength held together with a pattern.
inline constexpr int kMaxPatternLength = 1024;
// Most lookaheads of one pattern (each `$` that does not end a top-level alternative is
// one), and most states of the deterministic automaton a pattern with lookaheads becomes.
inline constexpr int kMaxLookaheads = 8;
inline constexpr int kMaxLookaheadStates = 2048;

class Pattern {
 public:
  // InvalidArgument naming what is outside the subset: backreferences, lookbehind, a
  // lookaround inside a lookaround or inside an unbounded repeat, word boundaries, flags,
  // ^ other than at a top-level alternative's start (or a lookahead's, where that stands
  // at the string's start), more than kMaxPatternPositions positions (in the pattern or a
  // lookahead's body), more than kMaxLookaheads lookaheads or kMaxLookaheadStates states,
  // a '{' that is no quantifier, an empty class, a pattern no string matches.
  // With minLength / maxLength (max_length -1: none, both at most kMaxPatternLength):
  // the string's characters must also number within them, and Step / AnyIn keep only
  // positions from which a match of such a length can still be reached, so the length
  // bounds add no dead end either. Refused when no match has such a length.
  static absl::StatusOr<Pattern> Compile(std::string_view source, int min_length = 0,
                                         int max_length = -1);

  // The state before any character.
  static constexpr uint64_t kStart = uint64_t{1} << 63;
  // The state after code point c, the string's `written`-th character, from state s; 0
  // when c cannot follow.
  uint64_t Step(uint64_t s, uint32_t c, int written) const;
  // Whether some code point in [lo, hi] can follow s as the `written`-th character.
  bool AnyIn(uint64_t s, uint32_t lo, uint32_t hi, int written) const;
  // The bytes its tables take (a schema's patterns are bounded together).
  size_t MemoryBytes() const;
  // Whether the characters that led to s are a whole match.
  bool Accepts(uint64_t s) const {
    if (!accepting_.empty()) return accepting_[s == kStart ? 0 : s - 1] != 0;
    return (s & last_) != 0 || ((s & kStart) != 0 && nullable_);
  }

  // A class: sorted, disjoint, inclusive code point ranges.
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

 private:
  struct Lookahead {
    int position;                         // the position standing for it
    std::shared_ptr<const Pattern> body;  // its body's automaton (no lookaheads)
    bool negative;
    bool at_start;  // its body asks for the string's start
  };
  // The position automaton of re; its lookaheads' positions have no class and are
  // listed in *looks.
  static absl::StatusOr<Pattern> Positions(const regex::Re& re, std::vector<Lookahead>* looks);
  // json_pattern_lookahead.cc: the deterministic automaton of the positions and looks,
  // then with the length bounds.
  absl::Status Determinize(const std::vector<Lookahead>& looks);
  absl::Status HoldStateLengths(int min_length, int max_length);
  int32_t StateStep(int32_t d, uint32_t c, int written) const;  // -1: none
  bool StateAllowed(int32_t d, int written) const;

  uint64_t Next(uint64_t s) const;  // the positions that may follow s
  // The positions a `written`-th character may take: those from which a match whose
  // length is within the bounds can still be reached.
  uint64_t Allowed(int written) const;
  absl::Status HoldLengths(int min_length, int max_length);  // fills allowed_

  std::vector<Ranges> classes_;  // per position
  std::vector<uint64_t> follow_;
  // Tables that make a step a few lookups (a vocabulary walk steps a pattern hundreds of
  // thousands of times a token): next_by_byte_[k][b], the positions that may follow the
  // set bits b of a state's byte k, for the bytes that hold positions (bit 63, the start,
  // leads to first_); ascii_[c], the positions whose class holds ASCII character c.
  std::vector<std::array<uint64_t, 256>> next_by_byte_;
  std::array<uint64_t, 128> ascii_{};
  uint64_t first_ = 0, last_ = 0;
  bool nullable_ = false;
  // Allowed(w) for w < allowed_.size(); every position past it (a length bound met,
  // or none given).
  std::vector<uint64_t> allowed_;
  int max_length_ = -1;

  // With lookaheads, the deterministic automaton (a state s is number s - 1, kStart
  // number 0). Its alphabet: atom k is the code points [atom_start_[k],
  // atom_start_[k + 1]) (the last to U+10FFFF), each class a union of atoms.
  std::vector<uint32_t> atom_start_;
  std::array<uint8_t, 128> atom_of_ascii_{};
  std::vector<int32_t> next_state_;  // [state][atom]: -1 none (or no match reachable)
  std::vector<uint8_t> accepting_;   // [state]; empty: no lookaheads
  // With length bounds: per count of characters written (below the table's end), the
  // states from which a match of a length within them can still be reached, as bits.
  std::vector<std::vector<uint64_t>> allowed_states_;
};

}  // namespace kvfold::structured

#endif  // KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_PATTERN_H_
