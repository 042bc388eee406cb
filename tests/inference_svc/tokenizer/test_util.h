// Helpers for the tokenizer tests: reading the shared text files (tests/testing/shared_dir.h
// locates them).
#ifndef KVFOLD_TESTS_INFERENCE_SVC_TOKENIZER_TEST_UTIL_H_
#define KVFOLD_TESTS_INFERENCE_SVC_TOKENIZER_TEST_UTIL_H_

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/testing/shared_dir.h"

namespace kvfold::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The first `count` stories of tinystories_train_sample.txt, each stripped of
// surrounding whitespace (stories are separated by lines "<|endoftext|>").
inline std::vector<std::string> FirstStories(const std::string& text, size_t count) {
  std::vector<std::string> stories;
  size_t pos = 0;
  const std::string sep = "<|endoftext|>";
  while (stories.size() < count && pos < text.size()) {
    size_t end = text.find(sep, pos);
    if (end == std::string::npos) end = text.size();
    std::string s = text.substr(pos, end - pos);
    const size_t b = s.find_first_not_of(" \t\r\n");
    const size_t e = s.find_last_not_of(" \t\r\n");
    if (b != std::string::npos) stories.push_back(s.substr(b, e - b + 1));
    pos = end + sep.size();
  }
  return stories;
}

// The control tokens of Mistral's v3 tokenizer that the mistral_v3 chat family writes
// (besides <s> and </s>): a test tokenizer's special tokens.
inline const std::vector<std::string> kMistralV3Controls = {
    "[INST]",       "[/INST]",        "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"};

// GPT-2's bytes_to_unicode, written independently of the library's table.
inline std::string ByteChar(int b) {
  std::vector<int> bs;
  for (int i = '!'; i <= '~'; ++i) bs.push_back(i);
  for (int i = 0xA1; i <= 0xAC; ++i) bs.push_back(i);
  for (int i = 0xAE; i <= 0xFF; ++i) bs.push_back(i);
  int n = 0, cp = -1;
  for (int i = 0; i < 256; ++i) {
    const bool printable = std::find(bs.begin(), bs.end(), i) != bs.end();
    const int c = printable ? i : 256 + n++;
    if (i == b) cp = c;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

// Every special string of the chat families, then Mistral v3's control tokens: the added
// tokens 256.. of ByteLevelTokenizerJson.
inline const std::vector<std::string> kChatSpecials = [] {
  std::vector<std::string> all = {"<|begin_of_text|>",
                                  "<|start_header_id|>",
                                  "<|end_header_id|>",
                                  "<|eot_id|>",
                                  "<|im_start|>",
                                  "<|im_end|>",
                                  "<s>",
                                  "</s>",
                                  "<bos>",
                                  "<eos>",
                                  "<start_of_turn>",
                                  "<end_of_turn>"};
  all.insert(all.end(), kMistralV3Controls.begin(), kMistralV3Controls.end());
  return all;
}();

// The id of special string `text` in ByteLevelTokenizerJson's vocabulary, -1 if none.
inline int32_t ChatSpecialId(const std::string& text) {
  const auto it = std::find(kChatSpecials.begin(), kChatSpecials.end(), text);
  return it == kChatSpecials.end() ? -1 : static_cast<int32_t>(256 + (it - kChatSpecials.begin()));
}

// A tokenizer.json of a byte-level vocabulary without merges (each byte exactly one id,
// its value) with kChatSpecials as special added tokens 256..: every chat family's
// special strings are one token each.
inline std::string ByteLevelTokenizerJson() {
  using json = nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  json added = json::array();
  for (const std::string& s : kChatSpecials) {
    added.push_back({{"id", ChatSpecialId(s)}, {"content", s}, {"special", true}});
  }
  json model = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", json::array()},
                {"byte_fallback", false},
                {"ignore_merges", false}};
  return json{
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", model}}
      .dump();
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INFERENCE_SVC_TOKENIZER_TEST_UTIL_H_
