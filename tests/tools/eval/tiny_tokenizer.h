// A 300-entry llama2.c tokenizer.bin for the tiny random models (vocab_size 300):
// <unk>, BOS, EOS, the 256 byte pieces, ' ', the lower-case letters, a few merges, "." and
// ",": encoding exercises merges and byte fallback (upper case, digits, newlines).
#ifndef KVFOLD_TESTS_TOOLS_EVAL_TINY_TOKENIZER_H_
#define KVFOLD_TESTS_TOOLS_EVAL_TINY_TOKENIZER_H_

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace kvfold::eval_test {

inline constexpr int kTinyVocab = 300;

// Writes the tokenizer to `path`; returns false on I/O failure.
inline bool WriteTinyTokenizer(const std::string& path) {
  std::vector<std::pair<std::string, float>> pieces = {
      {"<unk>", 0.0f}, {"\n<s>\n", 0.0f}, {"\n</s>\n", 0.0f}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    pieces.push_back({name, 0.0f});
  }
  pieces.push_back({" ", -100.0f});
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back({std::string(1, c), -100.0f});
  const char* merges[] = {" the", "the", " th", "th", "he", "in", " a", "an", "nd", " and",
                          "er", " t", ".", ","};
  float score = -1.0f;
  for (const char* m : merges) {
    pieces.push_back({m, score});
    score -= 1.0f;
  }
  if (static_cast<int>(pieces.size()) != kTinyVocab) return false;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const int32_t max_len = 8;
  out.write(reinterpret_cast<const char*>(&max_len), 4);
  for (const auto& [piece, s] : pieces) {
    const int32_t len = static_cast<int32_t>(piece.size());
    out.write(reinterpret_cast<const char*>(&s), 4);
    out.write(reinterpret_cast<const char*>(&len), 4);
    out.write(piece.data(), len);
  }
  return static_cast<bool>(out);
}

}  // namespace kvfold::eval_test

#endif  // KVFOLD_TESTS_TOOLS_EVAL_TINY_TOKENIZER_H_
