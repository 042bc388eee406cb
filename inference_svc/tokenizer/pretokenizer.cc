#include "inference_svc/tokenizer/pretokenizer.h"

#include <cstdint>

#include "inference_svc/tokenizer/unicode_tables.h"

namespace kvfold::tokenizer_internal {

const char kGpt2Regex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::optional<SplitPattern> RecognizeSplitPattern(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  return std::nullopt;
}

namespace {

// The text as codepoints with their byte offsets (offsets has one extra end entry).
struct Codepoints {
  std::vector<uint32_t> cp;
  std::vector<size_t> offset;
  size_t size() const { return cp.size(); }
  bool Letter(size_t i) const { return i < cp.size() && IsLetter(cp[i]); }
  bool Number(size_t i) const { return i < cp.size() && IsNumber(cp[i]); }
  bool Space(size_t i) const { return i < cp.size() && IsWhitespace(cp[i]); }
  bool Other(size_t i) const {
    return i < cp.size() && !IsWhitespace(cp[i]) && !IsLetter(cp[i]) && !IsNumber(cp[i]);
  }
  bool Newline(size_t i) const { return i < cp.size() && (cp[i] == '\r' || cp[i] == '\n'); }
  bool Is(size_t i, uint32_t c) const { return i < cp.size() && cp[i] == c; }
};

// Simple case folding for the letters of the contractions: ASCII, plus U+017F LATIN
// SMALL LETTER LONG S, which folds to 's' (Rust's regex, Oniguruma and PCRE agree).
uint32_t Lower(uint32_t c) {
  if (c == 0x17F) return 's';
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

// 's|'t|'re|'ve|'m|'ll|'d at i, optionally ASCII-case-insensitive: end index or 0.
size_t Contraction(const Codepoints& t, size_t i, bool ignore_case) {
  if (!t.Is(i, '\'') || i + 1 >= t.size()) return 0;
  auto at = [&](size_t k) { return ignore_case ? Lower(t.cp[k]) : t.cp[k]; };
  const uint32_t a = at(i + 1);
  if (a == 's' || a == 't') return i + 2;
  if (i + 2 < t.size()) {
    const uint32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e')) return i + 3;
  }
  if (a == 'm') return i + 2;
  if (i + 2 < t.size() && a == 'l' && at(i + 2) == 'l') return i + 3;
  if (a == 'd') return i + 2;
  return 0;
}

template <typename Pred>
size_t RunEnd(const Codepoints& t, size_t i, Pred pred, size_t max_len = SIZE_MAX) {
  size_t j = i;
  while (j < t.size() && j - i < max_len && pred(j)) ++j;
  return j;
}

// The whitespace alternatives shared by all three patterns, at a whitespace char i:
// [\s*[\r\n]+ (Llama-3/Qwen2 only)] | \s+(?!\S) | \s+
size_t WhitespaceMatch(const Codepoints& t, size_t i, bool newline_alternative) {
  const size_t e = RunEnd(t, i, [&](size_t k) { return t.Space(k); });
  if (newline_alternative) {
    for (size_t p = e; p > i; --p) {
      if (t.Newline(p - 1)) return p;  // \s* backtracks to the last newline of the run
    }
  }
  if (e == t.size()) return e;  // (?!\S) holds at the end of text
  if (e - 1 > i) return e - 1;  // leave the last space to prefix the next word
  return e;                     // \s+
}

size_t MatchGpt2(const Codepoints& t, size_t i) {
  if (size_t e = Contraction(t, i, /*ignore_case=*/false)) return e;
  const size_t s = t.Is(i, ' ') ? i + 1 : i;  // the optional leading space
  auto letter = [&](size_t k) { return t.Letter(k); };
  auto number = [&](size_t k) { return t.Number(k); };
  auto other = [&](size_t k) { return t.Other(k); };
  if (t.Letter(s)) return RunEnd(t, s, letter);
  if (t.Number(s)) return RunEnd(t, s, number);
  if (t.Other(s)) return RunEnd(t, s, other);
  return WhitespaceMatch(t, i, /*newline_alternative=*/false);
}

size_t MatchLlama3(const Codepoints& t, size_t i, size_t max_digits) {
  if (size_t e = Contraction(t, i, /*ignore_case=*/true)) return e;
  auto letter = [&](size_t k) { return t.Letter(k); };
  auto other = [&](size_t k) { return t.Other(k); };
  auto newline = [&](size_t k) { return t.Newline(k); };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (t.Letter(i)) return RunEnd(t, i, letter);
  if (!t.Newline(i) && !t.Number(i) && t.Letter(i + 1)) return RunEnd(t, i + 1, letter);
  // \p{N}{1,max}
  if (t.Number(i)) return RunEnd(t, i, [&](size_t k) { return t.Number(k); }, max_digits);
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const size_t s = t.Is(i, ' ') && t.Other(i + 1) ? i + 1 : i;
  if (t.Other(s)) return RunEnd(t, RunEnd(t, s, other), newline);
  return WhitespaceMatch(t, i, /*newline_alternative=*/true);
}

}  // namespace

void SplitByPattern(SplitPattern pattern, std::string_view text,
                    std::vector<std::string_view>* pieces) {
  Codepoints t;
  t.cp.reserve(text.size());
  t.offset.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    const size_t len = DecodeUtf8(text, pos, &cp);
    t.cp.push_back(cp);
    t.offset.push_back(pos);
    pos += len;
  }
  t.offset.push_back(text.size());
  size_t i = 0;
  while (i < t.size()) {
    size_t end;
    switch (pattern) {
      case SplitPattern::kGpt2:
        end = MatchGpt2(t, i);
        break;
      case SplitPattern::kLlama3:
        end = MatchLlama3(t, i, 3);
        break;
      case SplitPattern::kQwen2:
      default:
        end = MatchLlama3(t, i, 1);
        break;
    }
    if (end <= i) end = i + 1;  // every character matches some alternative; be safe
    pieces->push_back(text.substr(t.offset[i], t.offset[end] - t.offset[i]));
    i = end;
  }
}

}  // namespace kvfold::tokenizer_internal
