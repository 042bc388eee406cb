// pretokenizer_split PATTERN < text: prints the byte length of each piece SplitByPattern
// makes (PATTERN: gpt2 | llama3 | qwen2). Driver for check_pretokenizer_regex.py.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "inference_svc/tokenizer/pretokenizer.h"

int main(int argc, char** argv) {
  using kvfold::tokenizer_internal::SplitPattern;
  if (argc != 2) {
    std::fprintf(stderr, "usage: pretokenizer_split gpt2|llama3|qwen2 < text\n");
    return 2;
  }
  const std::string name = argv[1];
  SplitPattern pattern;
  if (name == "gpt2") {
    pattern = SplitPattern::kGpt2;
  } else if (name == "llama3") {
    pattern = SplitPattern::kLlama3;
  } else if (name == "qwen2") {
    pattern = SplitPattern::kQwen2;
  } else {
    std::fprintf(stderr, "unknown pattern %s\n", argv[1]);
    return 2;
  }
  std::stringstream ss;
  ss << std::cin.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string_view> pieces;
  kvfold::tokenizer_internal::SplitByPattern(pattern, text, &pieces);
  for (auto piece : pieces) std::printf("%zu\n", piece.size());
  return 0;
}
