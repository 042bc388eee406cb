// SentencePiece .model through libsentencepiece: the Tokenizer-contract decode agrees
// with libsentencepiece's own DecodeIds, and bad files are rejected cleanly.
#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

using ::kvfold::testing::FirstStories;
using ::kvfold::testing::ReadAll;
using ::kvfold::testing::SharedFile;

TEST(SentencePieceTokenizerTest, DecodeMatchesLibrary) {
  for (const char* rel :
       {"models/stories260K/tok512.model", "models/tokenizers/llama2_32000.model"}) {
    const std::string path = SharedFile(rel);
    const std::string stories_path = SharedFile("text/tinystories_train_sample.txt");
    if (path.empty() || stories_path.empty()) GTEST_SKIP() << "shared files not found";
    auto parsed = SentencePieceTokenizer::Parse(ReadAll(path));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const SentencePieceTokenizer& tok = **parsed;
    EXPECT_EQ(tok.bos_id(), 1);
    EXPECT_EQ(tok.eos_id(), 2);
    EXPECT_TRUE(tok.IsSpecial(1));
    std::vector<std::string> texts = FirstStories(ReadAll(stories_path), 20);
    texts.push_back("Grüße 日本語 \xF0\x9F\x98\x80 done");
    texts.push_back(" starts with a space");
    for (const auto& text : texts) {
      for (bool bos : {false, true}) {
        auto ids = tok.Encode(text, bos);
        ASSERT_TRUE(ids.ok()) << ids.status();
        EXPECT_EQ(tok.Decode(*ids), tok.DecodeWithLibrary(*ids)) << rel << ": " << text;
      }
    }
    // Byte pieces decode to their byte; sequences of them form UTF-8 characters.
    std::vector<int32_t> bytes = {1, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3};
    EXPECT_EQ(tok.Decode(bytes), "\xF0\x9F\x98\x80");
    EXPECT_EQ(tok.Decode(bytes), tok.DecodeWithLibrary(bytes));
  }
}

TEST(SentencePieceTokenizerTest, RejectsGarbage) {
  auto t = SentencePieceTokenizer::Parse("this is not a protobuf \xFF\xFF\xFF");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string path = SharedFile("models/stories260K/tok512.model");
  if (path.empty()) GTEST_SKIP() << "tok512.model not found";
  const std::string bytes = ReadAll(path);
  auto cut = SentencePieceTokenizer::Parse(bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(cut.ok());
}

}  // namespace
}  // namespace kvfold
