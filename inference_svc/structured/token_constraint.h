// Holding a turn's tokens to a Grammar: before each pick, every token whose bytes cannot
// continue the document gets logit -inf; after it, the document moves past the token's
// bytes; once the document is whole and closed, the turn ends.
#ifndef KVFOLD_INFERENCE_SVC_STRUCTURED_TOKEN_CONSTRAINT_H_
#define KVFOLD_INFERENCE_SVC_STRUCTURED_TOKEN_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "inference_svc/structured/json_grammar.h"
#include "inference_svc/structured/json_matcher.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold::structured {

// A vocabulary's bytes (Tokenizer::TokenBytes), its text ids sorted by them so that ids
// sharing first bytes are tried one after another and share the matcher's work on those
// bytes. Special ids and ids without bytes are not text. Immutable; shared by turns.
class TokenTable {
 public:
  explicit TokenTable(const Tokenizer& tokenizer);

  int vocab_size() const { return static_cast<int>(bytes_.size()); }
  std::string_view bytes(int32_t id) const { return bytes_[id]; }

 private:
  friend class JsonConstraint;
  // Ids in byte order, and per id the first bytes it shares with the one before.
  struct Order {
    std::vector<int32_t> ids;
    std::vector<uint32_t> shared;
  };
  static Order Sorted(const std::vector<std::string>& bytes, std::vector<int32_t> ids);

  std::vector<std::string> bytes_;  // [vocab_size]
  Order text_;                      // every text id
  // [vocab_size]: the code points of an id whose bytes are whole UTF-8 characters, none
  // of them '"', '\\' or a control character (text inside any string); -1 otherwise.
  std::vector<int32_t> string_chars_;
  std::vector<uint8_t> string_text_;  // [vocab_size]: 1 where string_chars_ >= 0
  int32_t max_string_chars_ = 0;
  Order other_;  // the text ids with string_chars_ -1
  size_t max_bytes_ = 0;
};

class JsonConstraint {
 public:
  // `stop_ids`: the ids that end the turn (its stop ids, and the EOS ids unless it ignores
  // them); they are allowed exactly where the document is whole.
  JsonConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTable> table,
                 std::vector<int32_t> stop_ids);

  // `logits` [vocab_size] into *masked, every token that cannot continue the document at
  // -inf. FAILED_PRECONDITION when no token can (the vocabulary has no token for the
  // byte the document needs next).
  absl::Status Mask(std::span<const float> logits, std::vector<float>* masked);
  // The emitted token: the document moves past its bytes (a stop id moves nothing).
  void Accept(int32_t id);
  // The document is whole and nothing may follow it.
  bool Finished() const;

  const JsonMatcher& matcher() const { return matcher_; }

 private:
  // Walks `order`'s ids through the matcher, sharing the work on common first bytes;
  // allowed_[id] = 1 for those it admits.
  void Walk(const TokenTable::Order& order);

  std::shared_ptr<const TokenTable> table_;
  std::vector<int32_t> stop_ids_;
  JsonMatcher matcher_;
  std::vector<JsonMatcher> after_;  // scratch: after_[d], the matcher after d bytes of a token
  std::vector<uint8_t> allowed_;    // [vocab_size], scratch
};

}  // namespace kvfold::structured

#endif  // KVFOLD_INFERENCE_SVC_STRUCTURED_TOKEN_CONSTRAINT_H_
