// The hand-written pre-tokenizer scanners against splits worked out from the regexes.
#include "inference_svc/tokenizer/pretokenizer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvfold::tokenizer_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

std::vector<std::string> Split(SplitPattern p, std::string_view text) {
  std::vector<std::string_view> pieces;
  SplitByPattern(p, text, &pieces);
  std::string joined;
  for (auto s : pieces) joined += s;
  EXPECT_EQ(joined, text) << "pieces must tile the text";
  return {pieces.begin(), pieces.end()};
}

constexpr char kMixed[] = "Hello world's  123456 foo!!\n\n bar";

TEST(PretokenizerTest, Llama3) {
  EXPECT_THAT(Split(SplitPattern::kLlama3, kMixed),
              ElementsAre("Hello", " world", "'s", " ", " ", "123", "456", " foo", "!!\n\n",
                          " bar"));
  // Case-insensitive contractions; an apostrophe that starts no contraction prefixes a word.
  EXPECT_THAT(Split(SplitPattern::kLlama3, "I'LL don't 'quote'"),
              ElementsAre("I", "'LL", " don", "'t", " '", "quote", "'"));
  // (?i) folds U+017F LONG S to 's', as Rust/Oniguruma do.
  EXPECT_THAT(Split(SplitPattern::kLlama3, "x'\xC5\xBFx"), ElementsAre("x", "'\xC5\xBF", "x"));
  // Non-ASCII letters, CJK (Lo) and emoji (So, "other").
  EXPECT_THAT(Split(SplitPattern::kLlama3,
                    "h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80\xF0\x9F\x98\x80!"),
              ElementsAre("h\xC3\xA9llo", " w\xC3\xB6rld", " \xE6\x97\xA5\xE6\x9C\xAC",
                          " \xF0\x9F\x98\x80\xF0\x9F\x98\x80!"));
  // Whitespace: newline runs, trailing spaces, tabs before words.
  EXPECT_THAT(Split(SplitPattern::kLlama3, "a \n\n  b\tc   "),
              ElementsAre("a", " \n\n", " ", " b", "\tc", "   "));
  EXPECT_THAT(Split(SplitPattern::kLlama3, "x1234567"), ElementsAre("x", "123", "456", "7"));
}

TEST(PretokenizerTest, Qwen2SplitsDigitsOneByOne) {
  EXPECT_THAT(Split(SplitPattern::kQwen2, kMixed),
              ElementsAre("Hello", " world", "'s", " ", " ", "1", "2", "3", "4", "5", "6",
                          " foo", "!!\n\n", " bar"));
}

TEST(PretokenizerTest, Gpt2) {
  EXPECT_THAT(Split(SplitPattern::kGpt2, kMixed),
              ElementsAre("Hello", " world", "'s", " ", " 123456", " foo", "!!", "\n\n",
                          " bar"));
  EXPECT_THAT(Split(SplitPattern::kGpt2, "I'LL"), ElementsAre("I", "'", "LL"));
}

TEST(PretokenizerTest, RecognizesExactPatternsOnly) {
  EXPECT_EQ(RecognizeSplitPattern(kLlama3Regex), SplitPattern::kLlama3);
  EXPECT_EQ(RecognizeSplitPattern(kQwen2Regex), SplitPattern::kQwen2);
  EXPECT_EQ(RecognizeSplitPattern(kGpt2Regex), SplitPattern::kGpt2);
  EXPECT_EQ(RecognizeSplitPattern("\\s+"), std::nullopt);
}

TEST(PretokenizerTest, InvalidUtf8IsKeptByteExact) {
  const std::string text = "ab\xFF\xFE cd\xC3";
  auto pieces = Split(SplitPattern::kLlama3, text);
  EXPECT_FALSE(pieces.empty());
}

}  // namespace
}  // namespace kvfold::tokenizer_internal
