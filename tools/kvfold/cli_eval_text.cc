// `kvfold eval`: documents, NLL and the recall probe (cli_eval.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tools/kvfold/cli_eval.h"

namespace kvfold::cli::eval {

double NllSum::Mean() const {
  return tokens > 0 ? nll / static_cast<double>(tokens) : std::numeric_limits<double>::quiet_NaN();
}

std::vector<std::string> SplitDocuments(std::string_view text, bool split_endoftext) {
  std::vector<std::string> docs;
  auto add = [&docs](std::string_view piece) {
    const absl::string_view stripped =
        absl::StripAsciiWhitespace(absl::string_view(piece.data(), piece.size()));
    if (!stripped.empty()) docs.emplace_back(stripped);
  };
  if (!split_endoftext) {
    add(text);
    return docs;
  }
  constexpr std::string_view kMarker = "<|endoftext|>";
  for (size_t pos = 0;;) {
    const size_t next = text.find(kMarker, pos);
    add(text.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (next == std::string_view::npos) break;
    pos = next + kMarker.size();
  }
  return docs;
}

absl::StatusOr<std::pair<int, int>> ParseDocRange(std::string_view spec_text, int num_docs) {
  absl::string_view spec(spec_text.data(), spec_text.size());
  if (spec == "all") return std::make_pair(0, num_docs);
  if (absl::ConsumePrefix(&spec, "range:")) {
    const std::vector<absl::string_view> ab = absl::StrSplit(spec, ':');
    int a = 0, b = 0;
    if (ab.size() != 2 || !absl::SimpleAtoi(ab[0], &a) || !absl::SimpleAtoi(ab[1], &b) ||
        a < 0 || b <= a) {
      return absl::InvalidArgumentError("--docs range:A:B needs 0 <= A < B");
    }
    if (b > num_docs) {
      return absl::InvalidArgumentError(
          absl::StrCat("--docs asks for documents up to ", b, " but the text has ", num_docs));
    }
    return std::make_pair(a, b);
  }
  const bool first = absl::ConsumePrefix(&spec, "first:");
  const bool last = !first && absl::ConsumePrefix(&spec, "last:");
  int n = 0;
  if ((!first && !last) || !absl::SimpleAtoi(spec, &n) || n < 1) {
    return absl::InvalidArgumentError("--docs must be first:N, last:N, range:A:B or all with N >= 1");
  }
  if (n > num_docs) {
    return absl::InvalidArgumentError(
        absl::StrCat("--docs asks for ", n, " documents but the text has ", num_docs));
  }
  return first ? std::make_pair(0, n) : std::make_pair(num_docs - n, num_docs);
}

double TokenNll(std::span<const float> logits, int32_t target) {
  double max = -std::numeric_limits<double>::infinity();
  for (float v : logits) max = std::max(max, static_cast<double>(v));
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
  return max + std::log(sum) - static_cast<double>(logits[static_cast<size_t>(target)]);
}

namespace {

// Function words and the most frequent verbs/adjectives of simple English prose (stories,
// KJV); they are never probe candidates as content words (a capitalised name still is).
const std::set<std::string>& StopWords() {
  static const std::set<std::string> words = {
      "the",   "and",   "was",   "she",   "her",   "his",   "they",  "that",  "with",
      "said",  "you",   "had",   "him",   "them",  "for",   "were",  "are",   "not",
      "all",   "one",   "day",   "very",  "what",  "from",  "there", "their", "have",
      "this",  "then",  "when",  "will",  "can",   "but",   "saw",   "did",   "went",
      "time",  "upon",  "once",  "its",   "out",   "too",   "big",   "get",   "got",
      "how",   "who",   "like",  "want",  "wanted", "loved", "happy", "little", "help",
      "play",  "could", "would", "should", "shall", "into",  "some",  "again", "also",
      "which", "came",  "come",  "your",  "our",   "has",   "been",  "any",   "each",
      "because", "about", "after", "before", "over", "under", "down", "off",  "now",
      "just",  "more",  "much",  "many",  "new",   "old",   "good",  "yes",   "let",
      "see",   "look",  "looked", "know", "knew",  "made",  "make",  "say",   "says",
      "thee",  "thou",  "thy",   "thine", "unto",  "hath",  "unto",  "ye",    "shalt",
      "also",  "these", "those", "where", "here",  "why",   "because", "both", "than",
      "only",  "even",  "took",  "take",  "gave",  "give",  "put",   "told",  "tell",
      "felt",  "feel",  "fun",   "way",   "things", "thing", "too",  "well",  "ran",
      "run",   "began", "start", "started", "asked", "smiled", "decided", "friends",
      "friend", "together", "home", "mom", "dad", "mommy", "daddy"};
  return words;
}

struct Word {
  size_t begin, end;  // byte range in the decoded text
  std::string key;    // lower case
  bool name_use;      // capitalised and not at a sentence start
};

bool IsLetter(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)); }

// Sentence start: nothing but whitespace and quotes/brackets between the word and the
// previous . ! ? : ; or a digit, a newline, or the start of the text.
bool AtSentenceStart(const std::string& text, size_t begin) {
  for (size_t i = begin; i > 0; --i) {
    const char c = text[i - 1];
    if (c == '\n') return true;
    if (c == ' ' || c == '\t' || c == '"' || c == '\'' || c == '(' || c == '[') continue;
    return c == '.' || c == '!' || c == '?' || c == ':' || c == ';' ||
           absl::ascii_isdigit(static_cast<unsigned char>(c));
  }
  return true;
}

}  // namespace

RecallMarks RecallProbe(const Tokenizer& tokenizer, std::span<const int32_t> ids,
                        int64_t window) {
  const size_t n = ids.size();
  RecallMarks marks{std::vector<uint8_t>(n, 0), std::vector<uint8_t>(n, 0)};
  // Decoded text and, for every byte, the token it came from.
  std::string text;
  std::vector<int32_t> byte_token;
  for (size_t j = 0; j < n; ++j) {
    if (tokenizer.IsSpecial(ids[j])) continue;
    const std::string_view bytes = tokenizer.TokenBytes(ids[j]);
    text.append(bytes);
    byte_token.insert(byte_token.end(), bytes.size(), static_cast<int32_t>(j));
  }
  std::vector<Word> words;
  for (size_t i = 0; i < text.size();) {
    if (!IsLetter(text[i])) {
      ++i;
      continue;
    }
    size_t e = i;
    while (e < text.size() && IsLetter(text[e])) ++e;
    const bool upper = absl::ascii_isupper(static_cast<unsigned char>(text[i]));
    words.push_back({i, e, absl::AsciiStrToLower(absl::string_view(text.data() + i, e - i)),
                     upper && e - i >= 2 && !AtSentenceStart(text, i)});
    i = e;
  }
  std::set<std::string> names;
  for (const Word& w : words) {
    if (w.name_use) names.insert(w.key);
  }
  // key -> last token of its most recent occurrence so far.
  std::map<std::string, int32_t> last_end;
  for (const Word& w : words) {
    const bool is_name = names.count(w.key) > 0;
    const bool content = w.key.size() >= 3 && !StopWords().count(w.key);
    const int32_t first_tok = byte_token[w.begin];
    const int32_t last_tok = byte_token[w.end - 1];
    auto it = last_end.find(w.key);
    if ((is_name || content) && it != last_end.end()) {
      for (int32_t j = std::max<int32_t>(first_tok, 1); j <= last_tok; ++j) {
        // Skip tokens shared with the previous occurrence (cannot happen for letters
        // runs split by a non-letter, kept for safety) and those within the window.
        if (it->second < j - window) {
          marks.any[static_cast<size_t>(j)] = 1;
          if (is_name) marks.names[static_cast<size_t>(j)] = 1;
        }
      }
    }
    last_end[w.key] = last_tok;
  }
  return marks;
}

}  // namespace kvfold::cli::eval
