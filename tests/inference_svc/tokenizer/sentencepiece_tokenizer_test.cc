// kvfold's native SentencePiece reader against libsentencepiece (the reference): same ids
// on real text and whitespace/UTF-8 edge cases, same decoded text; bad files rejected.
#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"

#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/inference_svc/tokenizer/sentencepiece_reference.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

using ::kvfold::testing::FirstStories;
using ::kvfold::testing::ReadAll;
using ::kvfold::testing::SentencePieceReference;
using ::kvfold::testing::SharedFile;

std::vector<std::string> EdgeCases() {
  return {"",
          " ",
          "   ",
          "a",
          " leading",
          "trailing ",
          "  two  inner   spaces  ",
          "tabs\tand\nnew\r\nlines\n\n",
          "<s> literal control text </s> <unk>",
          "<0x0A> literal byte-piece text",
          "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD",
          "\xF0\x9F\x98\x80\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 emoji",
          "invalid \xFF\xFE utf8 \xC3 tail \xE2\x82",
          "U+FFFD itself: \xEF\xBF\xBD",
          "digits 1234567890 and 3.14159"};
}

class SentencePieceVsLibraryTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SentencePieceVsLibraryTest, SameIdsAndText) {
  const std::string path = SharedFile(GetParam());
  const std::string stories_path = SharedFile("text/tinystories_train_sample.txt");
  const std::string genesis_path = SharedFile("text/kjv_genesis.txt");
  if (path.empty() || stories_path.empty() || genesis_path.empty()) {
    GTEST_SKIP() << "shared files not found under " << ::kvfold::testing::SharedDir();
  }
  auto parsed = SentencePieceTokenizer::Parse(ReadAll(path));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const SentencePieceTokenizer& tok = **parsed;
  auto ref = SentencePieceReference::LoadFile(path);
  ASSERT_NE(ref, nullptr);
  ASSERT_EQ(tok.vocab_size(), ref->piece_size());
  EXPECT_EQ(tok.bos_id(), ref->bos_id());
  EXPECT_EQ(tok.eos_id(), ref->eos_id());
  EXPECT_TRUE(tok.IsSpecial(1));
  std::vector<std::string> texts = FirstStories(ReadAll(stories_path), 100);
  const std::string genesis = ReadAll(genesis_path);
  texts.push_back(genesis.substr(0, 50000));
  for (const auto& e : EdgeCases()) texts.push_back(e);
  for (size_t i = 0; i < texts.size(); ++i) {
    for (bool bos : {false, true}) {
      auto ids = tok.Encode(texts[i], bos);
      ASSERT_TRUE(ids.ok()) << ids.status();
      ASSERT_EQ(*ids, ref->EncodeIds(texts[i], bos)) << GetParam() << " text " << i;
      EXPECT_EQ(tok.Decode(*ids), ref->DecodeIds({ids->begin(), ids->end()}))
          << GetParam() << " text " << i;
    }
  }
  // Byte pieces decode to their byte; a sequence of them forms a UTF-8 character.
  const std::vector<int32_t> bytes = {1, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3};
  EXPECT_EQ(tok.Decode(bytes), "\xF0\x9F\x98\x80");
  EXPECT_EQ(tok.Decode(bytes), ref->DecodeIds({bytes.begin(), bytes.end()}));
}

INSTANTIATE_TEST_SUITE_P(RealModels, SentencePieceVsLibraryTest,
                         ::testing::Values("models/stories260K/tok512.model",
                                           "models/tokenizers/llama2_32000.model"));

TEST(SentencePieceTokenizerTest, GenesisEncodesFast) {
  const std::string path = SharedFile("models/tokenizers/llama2_32000.model");
  const std::string genesis_path = SharedFile("text/kjv_genesis.txt");
  if (path.empty() || genesis_path.empty()) GTEST_SKIP() << "shared files not found";
  auto tok = SentencePieceTokenizer::Parse(ReadAll(path));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string genesis = ReadAll(genesis_path);
  auto ref = SentencePieceReference::LoadFile(path);
  ASSERT_NE(ref, nullptr);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto ids = (*tok)->Encode(genesis, true);
  const auto t1 = Clock::now();
  const auto ref_ids = ref->EncodeIds(genesis, true);
  const auto t2 = Clock::now();
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, ref_ids);
  const double native_s = std::chrono::duration<double>(t1 - t0).count();
  const double library_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("{\"text\": \"kjv_genesis\", \"model\": \"llama2_32000\", \"num_tokens\": %zu, "
              "\"kvfold_s\": %.3f, \"libsentencepiece_s\": %.3f, \"speedup\": %.2f}\n",
              ids->size(), native_s, library_s, library_s / native_s);
  EXPECT_LT(native_s, 10.0);
}

TEST(SentencePieceTokenizerTest, RejectsGarbage) {
  auto t = SentencePieceTokenizer::Parse("this is not a protobuf \xFF\xFF\xFF");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SentencePieceTokenizer::Parse("").ok());
  const std::string path = SharedFile("models/stories260K/tok512.model");
  if (path.empty()) GTEST_SKIP() << "tok512.model not found";
  const std::string bytes = ReadAll(path);
  for (size_t cut : {size_t{1}, size_t{7}, bytes.size() / 2, bytes.size() - 1}) {
    auto truncated = SentencePieceTokenizer::Parse(bytes.substr(0, cut));
    EXPECT_FALSE(truncated.ok()) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace kvfold
