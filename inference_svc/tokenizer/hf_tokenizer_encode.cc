// tokenizer.json encode pipeline: added tokens -> normalizers -> pre-tokenizers -> BPE.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "inference_svc/tokenizer/bpe_merge.h"
#include "inference_svc/tokenizer/hf_tokenizer_impl.h"

namespace kvfold {
namespace {

using Impl = HfTokenizer::Impl;
using tokenizer_internal::DecodeUtf8;
using tokenizer_internal::SplitByPattern;
using tokenizer_internal::SplitPattern;

// The longest added token starting at text[pos], or null (leftmost-longest matching, as
// HF's added-vocabulary splitter).
const Impl::Added* MatchAdded(const Impl& m, std::string_view text, size_t pos) {
  const Impl::Added* best = nullptr;
  for (int32_t k : m.added_by_first_byte[static_cast<unsigned char>(text[pos])]) {
    const Impl::Added& a = m.added[k];
    if (a.content.size() <= text.size() - pos &&
        (best == nullptr || a.content.size() > best->content.size()) &&
        text.compare(pos, a.content.size(), a.content) == 0) {
      best = &a;
    }
  }
  return best;
}

// Splits around every occurrence of `sep`, keeping `sep` as its own piece (Isolated).
void SplitLiteral(std::string_view s, std::string_view sep, std::vector<std::string>* out) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t hit = s.find(sep, pos);
    if (hit == std::string_view::npos) break;
    if (hit > pos) out->emplace_back(s.substr(pos, hit - pos));
    out->emplace_back(sep);
    pos = hit + sep.size();
  }
  if (pos < s.size()) out->emplace_back(s.substr(pos));
}

// Metaspace with split: a new word starts at each replacement (MergedWithNext).
void SplitBeforeEach(std::string_view s, std::string_view sep, std::vector<std::string>* out) {
  size_t start = 0;
  size_t pos = s.empty() ? std::string_view::npos : s.find(sep, 1);
  while (pos != std::string_view::npos) {
    out->emplace_back(s.substr(start, pos - start));
    start = pos;
    pos = s.find(sep, pos + sep.size());
  }
  if (start < s.size()) out->emplace_back(s.substr(start));
}

class Encoder {
 public:
  Encoder(const Impl& m, std::vector<int32_t>* ids) : m_(m), ids_(ids) {}

  absl::Status Segment(std::string_view segment, bool at_text_start) {
    std::string s(segment);
    for (const auto& step : m_.normalizer_steps) {
      if (step.kind == Impl::Step::kPrepend) {
        if (!s.empty()) s = step.from + s;
      } else {
        s = tokenizer_internal::ReplaceAll(s, step.from, step.to);
      }
    }
    std::vector<std::string> words = {std::move(s)};
    std::vector<std::string> next;
    std::vector<std::string_view> parts;
    for (const auto& pre : m_.pre_tokenizers) {
      next.clear();
      for (std::string& w : words) {
        switch (pre.kind) {
          case Impl::PreTokenizer::kRegex:
            parts.clear();
            SplitByPattern(pre.pattern, w, &parts);
            for (auto p : parts) next.emplace_back(p);
            break;
          case Impl::PreTokenizer::kLiteral:
            SplitLiteral(w, pre.literal, &next);
            break;
          case Impl::PreTokenizer::kByteLevel: {
            if (pre.add_prefix_space && !w.starts_with(' ')) w = std::string(" ").append(w);
            parts.clear();
            if (pre.use_regex) {
              SplitByPattern(SplitPattern::kGpt2, w, &parts);
            } else {
              parts.push_back(w);
            }
            for (auto p : parts) {
              std::string mapped;
              for (unsigned char c : p) mapped += m_.byte_to_unicode[c];
              next.push_back(std::move(mapped));
            }
            break;
          }
          case Impl::PreTokenizer::kMetaspace: {
            std::string r = tokenizer_internal::ReplaceAll(w, " ", pre.literal);
            const bool prepend =
                pre.prepend == "always" ||
                (pre.prepend == "first" && at_text_start && &w == &words.front());
            if (prepend && !r.starts_with(pre.literal)) r = std::string(pre.literal).append(r);
            if (pre.split) {
              SplitBeforeEach(r, pre.literal, &next);
            } else {
              next.push_back(std::move(r));
            }
            break;
          }
        }
      }
      words.swap(next);
    }
    for (const auto& w : words) {
      if (auto s = Word(w); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  void AddedToken(int32_t id) { ids_->push_back(id); }

 private:
  absl::Status Word(const std::string& word) {
    if (word.empty()) return absl::OkStatus();
    if (words_seen_ > 0) {
      auto hit = cache_.find(word);
      if (hit != cache_.end()) {
        ids_->insert(ids_->end(), hit->second.begin(), hit->second.end());
        return absl::OkStatus();
      }
    }
    ++words_seen_;
    if (m_.ignore_merges) {
      auto it = m_.vocab.find(word);
      if (it != m_.vocab.end()) {
        ids_->push_back(it->second);
        return absl::OkStatus();
      }
    }
    symbols_.clear();
    for (size_t pos = 0; pos < word.size();) {
      uint32_t cp;
      const size_t len = DecodeUtf8(word, pos, &cp);
      const std::string_view ch(word.data() + pos, len);
      pos += len;
      auto it = m_.vocab.find(ch);
      if (it != m_.vocab.end()) {
        symbols_.push_back(it->second);
        continue;
      }
      if (m_.byte_fallback &&
          std::all_of(ch.begin(), ch.end(),
                      [&](char c) { return m_.byte_ids[static_cast<unsigned char>(c)] >= 0; })) {
        for (char c : ch) symbols_.push_back(m_.byte_ids[static_cast<unsigned char>(c)]);
        continue;
      }
      if (m_.unk_id < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer.json: character '", std::string(ch), "' has no token, no byte fallback and no unk"));
      }
      if (m_.fuse_unk && !symbols_.empty() && symbols_.back() == m_.unk_id) continue;
      symbols_.push_back(m_.unk_id);
    }
    tokenizer_internal::GreedyMerge<int32_t>(
        &symbols_, [&](int32_t a, int32_t b, int32_t* rank, int32_t* merged) {
          auto it = m_.merges.find(Impl::PairKey(a, b));
          if (it == m_.merges.end()) return false;
          *rank = it->second.rank;
          *merged = it->second.merged;
          return true;
        });
    ids_->insert(ids_->end(), symbols_.begin(), symbols_.end());
    if (word.size() <= 64) cache_.emplace(word, symbols_);
    return absl::OkStatus();
  }

  const Impl& m_;
  std::vector<int32_t>* ids_;
  std::vector<int32_t> symbols_;
  tokenizer_internal::StringMap<std::vector<int32_t>> cache_;
  size_t words_seen_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text,
                                                         bool add_bos) const {
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos && m.bos_id >= 0) ids.push_back(m.bos_id);
  Encoder encoder(m, &ids);
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const Impl::Added* hit = m.added.empty() ? nullptr : MatchAdded(m, text, pos);
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    if (pos > segment_start) {
      auto s = encoder.Segment(text.substr(segment_start, pos - segment_start),
                               segment_start == 0);
      if (!s.ok()) return s;
    }
    encoder.AddedToken(hit->id);
    pos += hit->content.size();
    segment_start = pos;
  }
  if (segment_start < text.size()) {
    auto s = encoder.Segment(text.substr(segment_start), segment_start == 0);
    if (!s.ok()) return s;
  }
  return ids;
}

}  // namespace kvfold
