// Seeded mutation fuzzing of the three parsers: truncations, bit flips, byte runs and
// spliced garbage over real files. Every result is either an error status or a tokenizer
// that encodes and decodes text without crashing (run under -DKVFOLD_SANITIZE=ON to check
// memory safety too).
#include <random>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "inference_svc/tokenizer/hf_tokenizer.h"
#include "inference_svc/tokenizer/llama2c_tokenizer.h"
#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

using ::kvfold::testing::ReadAll;
using ::kvfold::testing::SharedFile;

std::string Mutate(const std::string& in, std::mt19937& rng) {
  std::string s = in;
  if (s.empty()) return s;
  std::uniform_int_distribution<size_t> pos(0, s.size() - 1);
  switch (rng() % 5) {
    case 0:  // truncate
      s.resize(pos(rng));
      break;
    case 1:  // flip a few bits
      for (int k = 0; k < 1 + static_cast<int>(rng() % 8); ++k) s[pos(rng)] ^= 1 << (rng() % 8);
      break;
    case 2:  // overwrite a run with one byte value (0x00, 0xFF, ...)
      {
        const size_t at = pos(rng);
        const size_t len = std::min<size_t>(s.size() - at, 1 + rng() % 16);
        std::fill(s.begin() + at, s.begin() + at + len, static_cast<char>(rng() % 2 ? 0xFF : 0));
      }
      break;
    case 3:  // insert random bytes
      {
        std::string junk(1 + rng() % 16, '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        s.insert(pos(rng), junk);
      }
      break;
    default:  // duplicate a slice
      {
        const size_t at = pos(rng);
        s.insert(pos(rng), s.substr(at, std::min<size_t>(64, s.size() - at)));
      }
      break;
  }
  return s;
}

void Exercise(const Tokenizer& tok) {
  const std::string text = "Once upon a time \xF0\x9F\x98\x80 caf\xC3\xA9 \xFF <s> ok";
  auto ids = tok.Encode(text, true);
  if (!ids.ok()) return;
  for (int32_t id : *ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << id;
  (void)tok.Decode(*ids);
}

template <typename ParseFn>
void Fuzz(const std::string& original, int iterations, uint32_t seed, ParseFn&& parse) {
  std::mt19937 rng(seed);
  int accepted = 0;
  for (int i = 0; i < iterations; ++i) {
    const std::string mutated = Mutate(original, rng);
    auto tok = parse(mutated);
    if (tok.ok()) {
      ++accepted;
      Exercise(**tok);
    } else {
      EXPECT_FALSE(tok.status().message().empty());
    }
  }
  std::printf("{\"iterations\": %d, \"accepted\": %d}\n", iterations, accepted);
}

TEST(TokenizerFuzzTest, Llama2cBin) {
  const std::string path = SharedFile("models/stories260K/tok512.bin");
  if (path.empty()) GTEST_SKIP() << "tok512.bin not found";
  Fuzz(ReadAll(path), 2000, 1, [](const std::string& b) { return Llama2cTokenizer::Parse(b); });
}

TEST(TokenizerFuzzTest, SentencePieceModel) {
  const std::string path = SharedFile("models/stories260K/tok512.model");
  if (path.empty()) GTEST_SKIP() << "tok512.model not found";
  Fuzz(ReadAll(path), 2000, 2,
       [](const std::string& b) { return SentencePieceTokenizer::Parse(b); });
}

TEST(TokenizerFuzzTest, TokenizerJson) {
  // A small byte-fallback tokenizer.json written here (no real one is shared).
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const std::string meta = "\xE2\x96\x81";
  vocab[meta] = 259;
  vocab["O"] = 260;
  vocab["n"] = 261;
  vocab[meta + "O"] = 262;
  nlohmann::json j = {
      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", meta}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}}}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"vocab", vocab},
        {"merges", {meta + " O"}}}}};
  auto tok = HfTokenizer::Parse(j.dump(), "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  Exercise(**tok);
  Fuzz(j.dump(), 2000, 3, [](const std::string& b) { return HfTokenizer::Parse(b, ""); });
}

}  // namespace
}  // namespace kvfold
