// A byte-by-byte recognizer of a Grammar's documents (json_grammar.h): after every byte it
// knows whether the bytes so far can still become a document, whether they are one, and
// whether anything may follow. JsonConstraint (token_constraint.h) asks it which tokens
// keep a turn on course.
//
// The state is a set of parse stacks (an anyOf forks one per alternative; forks die
// at the first byte their alternative refuses), each a few frames of plain integers, so a
// matcher is cheap to copy.
#ifndef KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_MATCHER_H_
#define KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_MATCHER_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "inference_svc/structured/json_grammar.h"

namespace kvfold::structured {

class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const Grammar> grammar);
  // A copy holds the grammar and the state, not the spare buffers.
  JsonMatcher(const JsonMatcher& other) : grammar_(other.grammar_), stacks_(other.stacks_) {}
  JsonMatcher& operator=(const JsonMatcher& other) {
    grammar_ = other.grammar_;
    stacks_ = other.stacks_;
    return *this;
  }

  // Feeds `bytes`; false (and the matcher dead) as soon as a byte cannot continue any
  // document.
  bool Advance(std::string_view bytes);
  // The matcher after one more byte, written into *next (its buffers reused): what
  // Advance does, without changing this one. False when the byte kills it.
  bool AdvanceInto(uint8_t byte, JsonMatcher* next) const;

  bool dead() const { return stacks_.empty(); }
  // The bytes so far are a whole document.
  bool IsComplete() const;
  // Some byte may follow (false once a document is complete and closed).
  bool CanContinue() const;
  // True when the bytes so far end inside one string's text, between characters: then
  // any run of characters that are not '"', '\\' or control characters continues it while
  // the string stays within its length. *written: its code points so far; *max_length:
  // its bound (-1: none). *last_checked: a run that fills the string to max_length must be
  // walked (an item of an array with uniqueItems may not become one written before).
  bool InStringText(int* written, int* max_length, bool* last_checked) const;

  // One parse position: a frame per open value, innermost last.
  struct Frame {
    uint8_t type = 0;
    uint8_t phase = 0;
    uint8_t ws = 0;   // whitespace bytes in a row; bounded number: 1 when negative
    uint8_t aux = 0;  // value: 1 after ':' or ','; string: bytes or hex digits left;
                      // number: digits in this part
    int32_t node = 0;
    int32_t a = 0;      // object: last property written; array: items; string: code points;
                        // literal: bytes matched; bounded number: integer digits
    int32_t b = 0;      // object: bytes of the key matched; bounded number: 1 once a
                        // fraction digit is not 0; string with a pattern: the code point
                        // so far of a character being written; value: 1 when `bits`
                        // holds the literals it may be (OfferUnwritten)
    uint64_t bits = 0;  // object: key candidates; literal: candidates; string: byte bounds;
                        // bounded number: its integer part; array with uniqueItems, map
                        // with listed keys: the literals written; value: see b
    uint64_t pattern = 0;  // string with a pattern: the automaton's state (Pattern)
    bool operator==(const Frame&) const = default;
  };
  using Stack = std::vector<Frame>;

 private:
  // Feeds `byte` to stack s; what survives is moved to *out (s is left as it was when the
  // byte kills it, so its buffer can be reused).
  void Feed(Stack& s, uint8_t byte, std::vector<Stack>* out) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  // Buffers of stacks this matcher held before, for AdvanceInto to refill: a walk over a
  // vocabulary advances matchers thousands of times a token and, once they have grown,
  // allocates nothing (anyOf forks aside).
  std::vector<Stack> spare_;
};

}  // namespace kvfold::structured

#endif  // KVFOLD_INFERENCE_SVC_STRUCTURED_JSON_MATCHER_H_
