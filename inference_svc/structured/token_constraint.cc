#include "inference_svc/structured/token_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "common/utf8.h"

namespace kvfold::structured {

namespace {

// Code points of `b` when it is whole UTF-8 characters (no overlong forms, surrogates or
// values above U+10FFFF), none of them '"', '\\' or below U+0020; -1 otherwise.
int32_t StringChars(std::string_view b) {
  int32_t chars = 0;
  for (size_t i = 0; i < b.size(); ++chars) {
    const uint8_t c = static_cast<uint8_t>(b[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') return -1;
      ++i;
      continue;
    }
    Utf8Lead lead;
    if (!Utf8LeadOf(c, &lead)) return -1;
    const size_t more = static_cast<size_t>(lead.continuation);
    uint8_t lo = lead.lo, hi = lead.hi;
    if (i + more >= b.size()) return -1;  // a piece of a character
    for (size_t k = 1; k <= more; ++k) {
      const uint8_t d = static_cast<uint8_t>(b[i + k]);
      if (d < lo || d > hi) return -1;
      lo = 0x80;
      hi = 0xBF;
    }
    i += more + 1;
  }
  return chars;
}

}  // namespace

TokenTable::Order TokenTable::Sorted(const std::vector<std::string>& bytes,
                                     std::vector<int32_t> ids) {
  Order o;
  std::sort(ids.begin(), ids.end(), [&bytes](int32_t x, int32_t y) {
    return bytes[x] != bytes[y] ? bytes[x] < bytes[y] : x < y;
  });
  o.shared.resize(ids.size());
  for (size_t k = 1; k < ids.size(); ++k) {
    const std::string& p = bytes[ids[k - 1]];
    const std::string& q = bytes[ids[k]];
    const size_t n = std::min(p.size(), q.size());
    uint32_t i = 0;
    while (i < n && p[i] == q[i]) ++i;
    o.shared[k] = i;
  }
  o.ids = std::move(ids);
  return o;
}

TokenTable::TokenTable(const Tokenizer& tokenizer) {
  const int32_t vocab = tokenizer.vocab_size();
  bytes_.resize(vocab);
  string_chars_.assign(vocab, -1);
  string_text_.assign(vocab, 0);
  std::vector<int32_t> text, other;
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    bytes_[id] = std::string(tokenizer.TokenBytes(id));
    if (bytes_[id].empty()) continue;
    text.push_back(id);
    string_chars_[id] = StringChars(bytes_[id]);
    if (string_chars_[id] < 0) {
      other.push_back(id);
    } else {
      string_text_[id] = 1;
      max_string_chars_ = std::max(max_string_chars_, string_chars_[id]);
    }
    max_bytes_ = std::max(max_bytes_, bytes_[id].size());
  }
  text_ = Sorted(bytes_, std::move(text));
  other_ = Sorted(bytes_, std::move(other));
}

JsonConstraint::JsonConstraint(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenTable> table,
                               std::vector<int32_t> stop_ids)
    : table_(std::move(table)), stop_ids_(std::move(stop_ids)), matcher_(std::move(grammar)) {}

void JsonConstraint::Walk(const TokenTable::Order& order) {
  const TokenTable& t = *table_;
  after_[0] = matcher_;
  // Ids in byte order: after_[0..valid] hold the matcher after that many bytes of the id
  // tried before; an id reuses the ones for the bytes it shares with it. dead_at: that
  // id's byte which no document admits (-1: none), so ids sharing it are skipped.
  size_t valid = 0;
  int64_t dead_at = -1;
  for (size_t k = 0; k < order.ids.size(); ++k) {
    const int32_t id = order.ids[k];
    const std::string& b = t.bytes_[id];
    const size_t shared = k == 0 ? 0 : order.shared[k];
    if (dead_at >= 0 && static_cast<int64_t>(shared) > dead_at) continue;
    size_t d = std::min(valid, shared);
    dead_at = -1;
    for (; d < b.size(); ++d) {
      if (!after_[d].AdvanceInto(static_cast<uint8_t>(b[d]), &after_[d + 1])) {
        dead_at = static_cast<int64_t>(d);
        break;
      }
    }
    valid = d;
    if (dead_at < 0) allowed_[id] = 1;
  }
}

absl::Status JsonConstraint::Mask(std::span<const float> logits, std::vector<float>* masked) {
  const TokenTable& t = *table_;
  if (after_.size() < t.max_bytes_ + 1) after_.resize(t.max_bytes_ + 1, matcher_);
  int written = 0, max_length = -1;
  bool last_checked = false;
  if (matcher_.InStringText(&written, &max_length, &last_checked) &&
      (!last_checked || written + t.max_string_chars_ < max_length)) {
    // Inside a string's text: an id of plain characters continues it while the string
    // stays within its length; only the others (quotes, escapes, pieces of characters)
    // are walked through the matcher.
    if (max_length < 0 || written + t.max_string_chars_ <= max_length) {
      allowed_ = t.string_text_;  // room for any of them
    } else {
      allowed_.assign(t.bytes_.size(), 0);
      for (int32_t id : t.text_.ids) {
        const int32_t chars = t.string_chars_[id];
        if (chars >= 0 && written + chars <= max_length) allowed_[id] = 1;
      }
    }
    Walk(t.other_);
  } else {
    allowed_.assign(t.bytes_.size(), 0);
    Walk(t.text_);
  }
  if (matcher_.IsComplete()) {
    for (int32_t id : stop_ids_) {
      if (id >= 0 && id < t.vocab_size()) allowed_[id] = 1;
    }
  }
  masked->assign(logits.begin(), logits.end());
  bool any = false;
  for (size_t id = 0; id < masked->size(); ++id) {
    if (id < allowed_.size() && allowed_[id]) {
      any = true;
    } else {
      (*masked)[id] = -std::numeric_limits<float>::infinity();
    }
  }
  if (!any) {
    return absl::FailedPreconditionError("no token of the vocabulary continues the JSON document");
  }
  return absl::OkStatus();
}

void JsonConstraint::Accept(int32_t id) {
  if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) return;
  if (id < 0 || id >= table_->vocab_size()) return;
  matcher_.Advance(table_->bytes(id));
}

bool JsonConstraint::Finished() const {
  return matcher_.dead() || (matcher_.IsComplete() && !matcher_.CanContinue());
}

}  // namespace kvfold::structured
