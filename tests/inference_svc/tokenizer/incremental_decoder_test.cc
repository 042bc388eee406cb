// Streaming detokenization: never broken UTF-8, and the stream equals Decode.
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

using ::kvfold::testing::SharedFile;

bool IsValidUtf8(const std::string& s) {
  std::string pending = s, out;
  DrainUtf8(&pending, /*final=*/false, &out);
  return pending.empty() && out == s;
}

TEST(DrainUtf8Test, ValidInvalidAndIncomplete) {
  auto drain = [](std::string in, bool final, std::string* rest) {
    std::string out;
    DrainUtf8(&in, final, &out);
    *rest = in;
    return out;
  };
  std::string rest;
  EXPECT_EQ(drain("abc\xC3\xA9", false, &rest), "abc\xC3\xA9");
  EXPECT_EQ(rest, "");
  EXPECT_EQ(drain("ab\xF0\x9F\x98", false, &rest), "ab");  // incomplete emoji held back
  EXPECT_EQ(rest, "\xF0\x9F\x98");
  EXPECT_EQ(drain("ab\xF0\x9F\x98", true, &rest), "ab\xEF\xBF\xBD");  // flushed: one U+FFFD
  EXPECT_EQ(rest, "");
  // Invalid bytes: one U+FFFD per maximal subpart, as Rust's from_utf8_lossy.
  EXPECT_EQ(drain("\xFF" "a", false, &rest), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(drain("\xF0\x9F" "a", false, &rest), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(drain("\xC0\xAF", false, &rest), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(drain("\xED\xA0\x80", false, &rest),  // surrogate
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(drain("\xE2\x82", false, &rest), "");
  EXPECT_EQ(rest, "\xE2\x82");
}

class StreamTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamTest, OneTokenAtATimeNeverBreaksUtf8) {
  const std::string path = SharedFile(GetParam());
  if (path.empty()) GTEST_SKIP() << GetParam() << " not found";
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<std::string> texts = {
      "Hello \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 world",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88 and \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 family, caf\xC3\xA9, \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
      "Once upon a time, there was a little girl named Lily."};
  for (const auto& text : texts) {
    auto ids = (*tok)->Encode(text, true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    IncrementalDecoder decoder(tok->get());
    std::string streamed;
    for (int32_t id : *ids) {
      const std::string piece = decoder.Push(id);
      EXPECT_TRUE(IsValidUtf8(piece)) << "token " << id;
      streamed += piece;
    }
    streamed += decoder.Flush();
    EXPECT_EQ(streamed, (*tok)->Decode(*ids));
    EXPECT_EQ(streamed, text);
  }
}

TEST_P(StreamTest, RandomIdsStreamEqualsDecode) {
  const std::string path = SharedFile(GetParam());
  if (path.empty()) GTEST_SKIP() << GetParam() << " not found";
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any(-3, (*tok)->vocab_size() + 3);
  std::uniform_int_distribution<int32_t> bytes(3, 258);  // byte pieces: broken sequences
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int32_t> ids(1 + trial);
    for (auto& id : ids) id = (rng() % 2) ? any(rng) : bytes(rng);
    IncrementalDecoder decoder(tok->get());
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = decoder.Push(id);
      ASSERT_TRUE(IsValidUtf8(piece));
      streamed += piece;
    }
    const std::string tail = decoder.Flush();
    EXPECT_TRUE(IsValidUtf8(tail));
    streamed += tail;
    EXPECT_EQ(streamed, (*tok)->Decode(ids));
  }
}

TEST_P(StreamTest, ContinuationKeepsLeadingSpace) {
  const std::string path = SharedFile(GetParam());
  if (path.empty()) GTEST_SKIP() << GetParam() << " not found";
  auto tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto prompt = (*tok)->Encode("Once upon", true);
  auto full = (*tok)->Encode("Once upon a time", true);
  ASSERT_TRUE(prompt.ok() && full.ok());
  ASSERT_LT(prompt->size(), full->size());
  IncrementalDecoder decoder(tok->get(), /*at_text_start=*/false);
  std::string continuation;
  for (size_t i = prompt->size() - 1; i < full->size(); ++i) {
    if (i < prompt->size()) continue;
    continuation += decoder.Push((*full)[i]);
  }
  continuation += decoder.Flush();
  EXPECT_EQ(continuation, " a time");
}

INSTANTIATE_TEST_SUITE_P(RealFiles, StreamTest,
                         ::testing::Values("models/stories260K/tok512.bin",
                                           "models/stories260K/tok512.model",
                                           "models/tokenizers/llama2_32000.bin",
                                           "models/tokenizers/llama2_32000.model"));

}  // namespace
}  // namespace kvfold
