// `kvfold eval` helpers in process: document splitting, --docs ranges, the NLL of a token
// and the recall probe's marks on a hand-checked text (tools/kvfold/cli_eval.h).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "gtest/gtest.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "tests/tools/eval/tiny_tokenizer.h"
#include "tools/kvfold/cli_eval.h"

namespace kvfold::cli::eval {
namespace {

TEST(EvalDocumentsTest, SplitsAtEndOfTextAndStrips) {
  const std::string text = "  One story.\n<|endoftext|>\n\nTwo\nlines.\n<|endoftext|>\n \n<|endoftext|>Three";
  EXPECT_EQ(SplitDocuments(text, true),
            (std::vector<std::string>{"One story.", "Two\nlines.", "Three"}));
  EXPECT_EQ(SplitDocuments(text, false).size(), 1u);
  EXPECT_EQ(SplitDocuments(" \n ", true).size(), 0u);
}

TEST(EvalDocumentsTest, DocRanges) {
  EXPECT_EQ(*ParseDocRange("first:3", 10), std::make_pair(0, 3));
  EXPECT_EQ(*ParseDocRange("last:3", 10), std::make_pair(7, 10));
  EXPECT_EQ(*ParseDocRange("all", 10), std::make_pair(0, 10));
  EXPECT_EQ(*ParseDocRange("range:2:5", 10), std::make_pair(2, 5));
  EXPECT_FALSE(ParseDocRange("range:5:5", 10).ok());
  EXPECT_FALSE(ParseDocRange("range:2:11", 10).ok());
  EXPECT_FALSE(ParseDocRange("range:2", 10).ok());
  EXPECT_EQ(*ParseDocRange("last:10", 10), std::make_pair(0, 10));
  for (const char* bad : {"last:0", "last:11", "first:-1", "middle:3", "last:", "3", "first:2x"}) {
    EXPECT_EQ(ParseDocRange(bad, 10).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(EvalNllTest, MatchesLogSoftmax) {
  const std::vector<float> logits = {1.0f, -2.5f, 3.25f, 0.0f, 1000.0f};
  double z = 0.0;
  for (float v : logits) z += std::exp(static_cast<double>(v) - 1000.0);
  EXPECT_NEAR(TokenNll(logits, 2), 1000.0 + std::log(z) - 3.25, 1e-9);
  EXPECT_NEAR(TokenNll(logits, 4), std::log(z), 1e-12);
  const std::vector<float> uniform(7, 0.5f);
  EXPECT_NEAR(TokenNll(uniform, 3), std::log(7.0), 1e-12);
}

class RecallProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("kvfold_eval_probe_" + std::to_string(::getpid()) + ".bin")).string();
    ASSERT_TRUE(eval_test::WriteTinyTokenizer(path_));
    auto tok = Tokenizer::Load(path_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  // Token indices (in `ids`) whose bytes overlap the occurrence number `k` of `word`.
  std::vector<int> TokensOf(const std::vector<int32_t>& ids, const std::string& word, int k) {
    std::string text;
    std::vector<int> owner;
    for (size_t j = 0; j < ids.size(); ++j) {
      if (tokenizer_->IsSpecial(ids[j])) continue;
      const std::string_view b = tokenizer_->TokenBytes(ids[j]);
      text.append(b);
      owner.insert(owner.end(), b.size(), static_cast<int>(j));
    }
    size_t pos = 0;
    for (int i = 0; i <= k; ++i) {
      pos = text.find(word, i == 0 ? 0 : pos + 1);
      if (pos == std::string::npos) return {};
    }
    std::vector<int> out;
    for (size_t b = pos; b < pos + word.size(); ++b) {
      if (out.empty() || out.back() != owner[b]) out.push_back(owner[b]);
    }
    return out;
  }

  std::string path_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(RecallProbeTest, MarksRepeatsOutsideTheWindowOnly) {
  // "Zed" is a name (capitalised mid-sentence), "kettle" a content word, "the"/"and" are
  // stop words. Filler between the occurrences is long enough to push them out of a
  // 40-token window in the second half, but not between the first two "kettle"s.
  std::string filler;
  for (int i = 0; i < 12; ++i) filler += " then and so it is on";
  const std::string text = "a dog saw Zed and the kettle. the kettle," + filler +
                           " then Zed and the kettle and the dog.";
  auto ids = tokenizer_->Encode(text, true);
  ASSERT_TRUE(ids.ok());
  const int64_t window = 40;
  RecallMarks marks = RecallProbe(*tokenizer_, *ids, window);
  ASSERT_EQ(marks.any.size(), ids->size());
  std::vector<int> marked;
  for (size_t j = 0; j < ids->size(); ++j) {
    if (marks.any[j]) marked.push_back(static_cast<int>(j));
    if (marks.names[j]) {
      EXPECT_TRUE(marks.any[j]);
    }
  }
  std::vector<int> expected;
  const std::vector<int> zed2 = TokensOf(*ids, "Zed", 1);
  const std::vector<int> kettle3 = TokensOf(*ids, "kettle", 2);
  const std::vector<int> dog2 = TokensOf(*ids, "dog", 1);
  ASSERT_FALSE(zed2.empty());
  ASSERT_FALSE(kettle3.empty());
  ASSERT_FALSE(dog2.empty());
  for (const auto* v : {&zed2, &kettle3, &dog2}) expected.insert(expected.end(), v->begin(), v->end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(marked, expected);
  for (int j : zed2) EXPECT_TRUE(marks.names[static_cast<size_t>(j)]);
  for (int j : kettle3) EXPECT_FALSE(marks.names[static_cast<size_t>(j)]);
  // The second "kettle" repeats within the window: not marked.
  for (int j : TokensOf(*ids, "kettle", 1)) EXPECT_FALSE(marks.any[static_cast<size_t>(j)]);
  // With a window covering the whole text nothing is outside it.
  RecallMarks none = RecallProbe(*tokenizer_, *ids, static_cast<int64_t>(ids->size()));
  for (uint8_t m : none.any) EXPECT_EQ(m, 0);
}

TEST_F(RecallProbeTest, SentenceStartCapitalsAreNotNames) {
  // "Then" only ever starts a sentence: not a name; "Mira" after a comma is.
  std::string filler;
  for (int i = 0; i < 10; ++i) filler += " so it is on the hill";
  const std::string text = "Then it ran, Mira said. Then" + filler + ". Then Mira ran.";
  auto ids = tokenizer_->Encode(text, true);
  ASSERT_TRUE(ids.ok());
  RecallMarks marks = RecallProbe(*tokenizer_, *ids, 20);
  for (int j : TokensOf(*ids, "Then", 2)) EXPECT_FALSE(marks.names[static_cast<size_t>(j)]);
  for (int j : TokensOf(*ids, "Mira", 1)) {
    EXPECT_TRUE(marks.names[static_cast<size_t>(j)]) << j;
  }
}

}  // namespace
}  // namespace kvfold::cli::eval
