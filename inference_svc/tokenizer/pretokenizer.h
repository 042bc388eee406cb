// Hand-written scanners for the pre-tokenizer regexes of the byte-level BPE tokenizers
// (std::regex has no \p{L}; kvfold has no regex library). Each scanner reproduces the
// leftmost-first, backtracking semantics of its pattern exactly, for the character
// classes of Unicode 14 (see unicode_tables.h).
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_PRETOKENIZER_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_PRETOKENIZER_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvfold::tokenizer_internal {

enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 with \p{N} (one digit per piece) instead of \p{N}{1,3}.
  kQwen2,
};

extern const char kGpt2Regex[];
extern const char kLlama3Regex[];
extern const char kQwen2Regex[];

// The pattern whose regex source is `regex` (exact text), or nullopt.
std::optional<SplitPattern> RecognizeSplitPattern(std::string_view regex);

// Appends to *pieces the matches of `pattern` in `text`, in order, with any unmatched
// gap as its own piece (HF Split behaviour "Isolated"); the pieces tile `text`.
void SplitByPattern(SplitPattern pattern, std::string_view text,
                    std::vector<std::string_view>* pieces);

}  // namespace kvfold::tokenizer_internal

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_PRETOKENIZER_H_
