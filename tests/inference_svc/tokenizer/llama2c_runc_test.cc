// Bit-for-bit check of Llama2cTokenizer::Encode against a literal transcription of
// llama2.c run.c's encode() (sorted vocab + bsearch + the quadratic merge loop), on real
// text and on random byte strings (invalid UTF-8, stray continuation bytes, long runs).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/tokenizer/llama2c_tokenizer.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

using ::kvfold::testing::FirstStories;
using ::kvfold::testing::ReadAll;
using ::kvfold::testing::SharedFile;

// ---- run.c, transcribed (only types and allocation adapted to C++) ----
struct TokenIndex {
  const char* str;
  int id;
};

int CompareTokens(const void* a, const void* b) {
  return std::strcmp(static_cast<const TokenIndex*>(a)->str,
                     static_cast<const TokenIndex*>(b)->str);
}

int StrLookup(const char* str, const TokenIndex* sorted_vocab, int vocab_size) {
  TokenIndex tok = {str, 0};
  auto* res = static_cast<const TokenIndex*>(
      std::bsearch(&tok, sorted_vocab, vocab_size, sizeof(TokenIndex), CompareTokens));
  return res != nullptr ? res->id : -1;
}

// run.c's Tokenizer struct, filled from the parsed file (build_tokenizer + the lazy
// sorted_vocab initialisation of encode()).
struct RunCTokenizer {
  explicit RunCTokenizer(const Llama2cTokenizer& t)
      : vocab_size(t.vocab_size()), max_token_length(t.max_token_length()) {
    for (int i = 0; i < vocab_size; ++i) {
      vocab.push_back(t.piece(i));
      vocab_scores.push_back(t.score(i));
    }
    for (int i = 0; i < vocab_size; ++i) sorted_vocab.push_back({vocab[i].c_str(), i});
    std::qsort(sorted_vocab.data(), vocab_size, sizeof(TokenIndex), CompareTokens);
  }
  int vocab_size;
  int max_token_length;
  std::vector<std::string> vocab;
  std::vector<float> vocab_scores;
  std::vector<TokenIndex> sorted_vocab;
};

std::vector<int32_t> RunCEncode(const RunCTokenizer& t, const char* text, bool bos) {
  const int vocab_size = t.vocab_size;
  const auto& vocab = t.vocab;
  const auto& vocab_scores = t.vocab_scores;
  const auto& sorted_vocab = t.sorted_vocab;
  std::vector<char> str_buffer(t.max_token_length * 2 + 1 + 2);
  size_t str_len = 0;
  std::vector<int> tokens(std::strlen(text) + 3);
  int n_tokens = 0;
  if (bos) tokens[n_tokens++] = 1;
  if (text[0] != '\0') {
    int dummy_prefix = StrLookup(" ", sorted_vocab.data(), vocab_size);
    tokens[n_tokens++] = dummy_prefix;
  }
  for (const char* c = text; *c != '\0'; c++) {
    if ((*c & 0xC0) != 0x80) str_len = 0;
    str_buffer[str_len++] = *c;
    str_buffer[str_len] = '\0';
    if ((*(c + 1) & 0xC0) == 0x80 && str_len < 4) continue;
    int id = StrLookup(str_buffer.data(), sorted_vocab.data(), vocab_size);
    if (id != -1) {
      tokens[n_tokens++] = id;
    } else {
      for (size_t i = 0; i < str_len; i++) {
        tokens[n_tokens++] = static_cast<unsigned char>(str_buffer[i]) + 3;
      }
    }
    str_len = 0;
  }
  std::string merge_buffer;
  while (true) {
    float best_score = -1e10;
    int best_id = -1;
    int best_idx = -1;
    for (int i = 0; i < n_tokens - 1; i++) {
      merge_buffer = vocab[tokens[i]] + vocab[tokens[i + 1]];  // sprintf("%s%s")
      int id = StrLookup(merge_buffer.c_str(), sorted_vocab.data(), vocab_size);
      if (id != -1 && vocab_scores[id] > best_score) {
        best_score = vocab_scores[id];
        best_id = id;
        best_idx = i;
      }
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    for (int i = best_idx + 1; i < n_tokens - 1; i++) tokens[i] = tokens[i + 1];
    n_tokens--;
  }
  return std::vector<int32_t>(tokens.begin(), tokens.begin() + n_tokens);
}
// ---- end of run.c ----

std::vector<std::string> Texts(uint32_t seed) {
  std::vector<std::string> texts;
  const std::string stories = SharedFile("text/tinystories_train_sample.txt");
  for (const auto& s : FirstStories(ReadAll(stories), 8)) texts.push_back(s.substr(0, 600));
  texts.push_back("  double  spaces, tabs\tand\nnew lines\n\n end  ");
  texts.push_back("Gr\xC3\xBC\xC3\x9F" "e \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80\xF0\x9F\x91\x8D");
  std::mt19937 rng(seed);
  for (int k = 0; k < 60; ++k) {
    std::string s(1 + rng() % 80, ' ');
    for (char& c : s) {
      const uint32_t r = rng() % 10;
      // ASCII letters/space, any non-NUL byte (run.c's strings stop at NUL), or a
      // continuation byte to stress run.c's UTF-8 grouping.
      c = r < 5 ? static_cast<char>("etaoin shrdlu"[rng() % 13])
                : r < 8 ? static_cast<char>(1 + rng() % 255)
                        : static_cast<char>(0x80 | (rng() % 64));
    }
    texts.push_back(s);
  }
  return texts;
}

class RunCTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RunCTest, EncodeIsBitForBitRunC) {
  const std::string path = SharedFile(GetParam());
  if (path.empty() || SharedFile("text/tinystories_train_sample.txt").empty()) {
    GTEST_SKIP() << "shared files not found under " << ::kvfold::testing::SharedDir();
  }
  auto tok = Llama2cTokenizer::Parse(ReadAll(path));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const RunCTokenizer runc(**tok);
  for (const auto& text : Texts(42)) {
    for (bool bos : {true, false}) {
      auto ids = (*tok)->Encode(text, bos);
      ASSERT_TRUE(ids.ok()) << ids.status();
      ASSERT_EQ(*ids, RunCEncode(runc, text.c_str(), bos)) << "text: " << text;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RealVocabs, RunCTest,
                         ::testing::Values("models/stories260K/tok512.bin",
                                           "models/tokenizers/llama2_32000.bin"));

}  // namespace
}  // namespace kvfold
