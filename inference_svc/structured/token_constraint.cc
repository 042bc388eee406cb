#include "inference_svc/structured/token_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace kvfold::structured {

TokenTable::TokenTable(const Tokenizer& tokenizer) {
  const int32_t vocab = tokenizer.vocab_size();
  bytes_.resize(vocab);
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    bytes_[id] = std::string(tokenizer.TokenBytes(id));
    if (bytes_[id].empty()) continue;
    order_.push_back(id);
    max_bytes_ = std::max(max_bytes_, bytes_[id].size());
  }
  std::sort(order_.begin(), order_.end(), [this](int32_t x, int32_t y) {
    return bytes_[x] != bytes_[y] ? bytes_[x] < bytes_[y] : x < y;
  });
  shared_.resize(order_.size());
  for (size_t k = 1; k < order_.size(); ++k) {
    const std::string& p = bytes_[order_[k - 1]];
    const std::string& q = bytes_[order_[k]];
    const size_t n = std::min(p.size(), q.size());
    uint32_t i = 0;
    while (i < n && p[i] == q[i]) ++i;
    shared_[k] = i;
  }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenTable> table,
                               std::vector<int32_t> stop_ids)
    : table_(std::move(table)), stop_ids_(std::move(stop_ids)), matcher_(std::move(grammar)) {}

absl::Status JsonConstraint::Mask(std::span<const float> logits, std::vector<float>* masked) {
  const TokenTable& t = *table_;
  allowed_.assign(t.bytes_.size(), 0);
  if (after_.size() < t.max_bytes_ + 1) after_.resize(t.max_bytes_ + 1, matcher_);
  after_[0] = matcher_;
  // Ids in byte order: after_[0..valid] hold the matcher after that many bytes of the id
  // tried before; an id reuses the ones for the bytes it shares with it. dead_at: that
  // id's byte which no document admits (-1: none), so ids sharing it are skipped.
  size_t valid = 0;
  int64_t dead_at = -1;
  for (size_t k = 0; k < t.order_.size(); ++k) {
    const int32_t id = t.order_[k];
    const std::string& b = t.bytes_[id];
    const size_t shared = k == 0 ? 0 : t.shared_[k];
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
