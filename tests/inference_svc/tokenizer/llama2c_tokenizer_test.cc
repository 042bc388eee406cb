// llama2.c tokenizer.bin: agreement with libsentencepiece on real text, pinned ids,
// round trips, speed on a long document, and malformed files.
#include "inference_svc/tokenizer/llama2c_tokenizer.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/inference_svc/tokenizer/sentencepiece_reference.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

using ::kvfold::testing::FirstStories;
using ::kvfold::testing::ReadAll;
using ::kvfold::testing::SharedFile;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::unique_ptr<Tokenizer> MustLoad(const std::string& path) {
  auto t = Tokenizer::Load(path);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int32_t> MustEncode(const Tokenizer& tok, std::string_view text, bool bos) {
  auto ids = tok.Encode(text, bos);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

#define REQUIRE_SHARED(var, rel)                                          \
  const std::string var = SharedFile(rel);                                \
  if (var.empty()) GTEST_SKIP() << "shared file " rel " not found under " \
                                << ::kvfold::testing::SharedDir() << " (set KVFOLD_SHARED_DIR)"

// The llama2.c file format, written by hand: exercises the parser and run.c semantics
// on a vocabulary small enough to reason about.
std::string MakeBin(const std::vector<std::pair<std::string, float>>& entries,
                    int32_t max_len = 16) {
  std::string out(reinterpret_cast<const char*>(&max_len), 4);
  for (const auto& [piece, score] : entries) {
    const int32_t len = static_cast<int32_t>(piece.size());
    out.append(reinterpret_cast<const char*>(&score), 4);
    out.append(reinterpret_cast<const char*>(&len), 4);
    out.append(piece);
  }
  return out;
}

TEST(Llama2cTokenizerTest, Tok512PinnedIds) {
  REQUIRE_SHARED(bin, "models/stories260K/tok512.bin");
  auto tok = MustLoad(bin);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  // Pinned from libsentencepiece on tok512.model (plus BOS), computed once.
  EXPECT_THAT(MustEncode(*tok, "Once upon a time", true),
              ElementsAreArray({1, 403, 407, 261, 378}));
  EXPECT_THAT(MustEncode(*tok, "Once upon a time", false),
              ElementsAreArray({403, 407, 261, 378}));
  EXPECT_THAT(MustEncode(*tok, "", true), ElementsAreArray({1}));
  EXPECT_TRUE(MustEncode(*tok, "", false).empty());
}

TEST(Llama2cTokenizerTest, Tok512AgreesWithSentencePieceOnStories) {
  REQUIRE_SHARED(bin, "models/stories260K/tok512.bin");
  REQUIRE_SHARED(model, "models/stories260K/tok512.model");
  REQUIRE_SHARED(stories_path, "text/tinystories_train_sample.txt");
  auto tok = MustLoad(bin);
  auto sp = ::kvfold::testing::SentencePieceReference::LoadFile(model);  // libsentencepiece
  ASSERT_NE(tok, nullptr);
  ASSERT_NE(sp, nullptr);
  const auto stories = FirstStories(ReadAll(stories_path), 100);
  ASSERT_EQ(stories.size(), 100u);
  // tok512.model's normalizer has remove_extra_whitespaces (runs of ' ' collapse to
  // one); llama2.c's encode does not normalize. They agree exactly on every story
  // without a double space, and on the others once the spaces are collapsed.
  size_t total = 0, with_double_space = 0, predicted = 0;
  for (size_t i = 0; i < stories.size(); ++i) {
    const auto a = MustEncode(*tok, stories[i], true);
    total += a.size() - 1;
    predicted += std::min<size_t>(a.size(), 512) - 1;
    EXPECT_EQ(tok->Decode(a), stories[i]) << "story " << i;
    if (stories[i].find("  ") == std::string::npos) {
      ASSERT_EQ(a, sp->EncodeIds(stories[i], true)) << "story " << i;
      continue;
    }
    ++with_double_space;
    std::string collapsed;
    for (char c : stories[i]) {
      if (!(c == ' ' && !collapsed.empty() && collapsed.back() == ' ')) collapsed += c;
    }
    ASSERT_EQ(MustEncode(*tok, collapsed, true), sp->EncodeIds(stories[i], true))
        << "story " << i;
  }
  EXPECT_GT(total, 30000u);
  EXPECT_LT(with_double_space, 10u);
  // The NLL protocol of docs/engine.md (truncate to 512, predict every token after BOS)
  // counts 37,072 predicted tokens with llama2.c's own encoder.
  EXPECT_EQ(predicted, 37072u);
}

TEST(Llama2cTokenizerTest, Llama2PinnedIdsAndByteFallback) {
  REQUIRE_SHARED(bin, "models/tokenizers/llama2_32000.bin");
  auto tok = MustLoad(bin);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 32000);
  // Pinned from libsentencepiece on llama2_32000.model: the emoji has no piece and
  // falls back to its 4 bytes (byte + 3), the CJK characters have pieces.
  const std::string text = "Once upon a time \xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E";
  EXPECT_THAT(MustEncode(*tok, text, true),
              ElementsAreArray({1, 9038, 2501, 263, 931, 29871, 243, 162, 155, 131, 29871,
                                30325, 30346, 30968}));
  EXPECT_EQ(tok->Decode(MustEncode(*tok, text, true)), text);
}

TEST(Llama2cTokenizerTest, Llama2AgreesWithSentencePieceOnRealText) {
  REQUIRE_SHARED(bin, "models/tokenizers/llama2_32000.bin");
  REQUIRE_SHARED(model, "models/tokenizers/llama2_32000.model");
  REQUIRE_SHARED(stories_path, "text/tinystories_train_sample.txt");
  REQUIRE_SHARED(genesis_path, "text/kjv_genesis.txt");
  auto tok = MustLoad(bin);
  auto sp = ::kvfold::testing::SentencePieceReference::LoadFile(model);  // libsentencepiece
  ASSERT_NE(tok, nullptr);
  ASSERT_NE(sp, nullptr);
  std::vector<std::string> texts = FirstStories(ReadAll(stories_path), 30);
  const std::string genesis = ReadAll(genesis_path);
  for (size_t off = 0; off + 2000 <= genesis.size() && texts.size() < 40; off += 20000) {
    texts.push_back(genesis.substr(off, 2000));  // ASCII text: byte offsets are safe
  }
  texts.push_back("Grüße aus Köln, café naïve, Ελληνικά, русский текст, 中文文本, "
                  "日本語のテキスト, 한국어, emoji \xF0\x9F\x8E\x89\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!");
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto a = MustEncode(*tok, texts[i], true);
    ASSERT_EQ(a, sp->EncodeIds(texts[i], true)) << "text " << i;
    EXPECT_EQ(tok->Decode(a), texts[i]) << "text " << i;
  }
}

TEST(Llama2cTokenizerTest, MultilingualRoundTripThroughByteFallback) {
  REQUIRE_SHARED(bin, "models/stories260K/tok512.bin");
  auto tok = MustLoad(bin);
  ASSERT_NE(tok, nullptr);
  // tok512 has almost no non-ASCII pieces: nearly everything here is byte fallback.
  const std::vector<std::string> texts = {
      "a", " leading space", "trailing space ", "two  spaces\n\nnew lines\ttab",
      "Grüße, naïve café", "日本語のテキスト", "\xF0\x9F\x98\x80\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
      "mixed: Привет 你好 \xF0\x9F\x8C\x8D ok"};
  for (const auto& text : texts) {
    const auto ids = MustEncode(*tok, text, true);
    EXPECT_EQ(tok->Decode(ids), text);
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 512);
  }
}

TEST(Llama2cTokenizerTest, RunCSemanticsOnHandBuiltVocab) {
  // ids: 0 <unk>, 1 BOS, 2 EOS, 3..258 bytes, then pieces with scores.
  std::vector<std::pair<std::string, float>> entries = {
      {"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    entries.push_back({buf, 0});
  }
  const int32_t base = static_cast<int32_t>(entries.size());
  entries.push_back({" ", -1});      // base + 0
  entries.push_back({"a", -2});      // base + 1
  entries.push_back({"b", -3});      // base + 2
  entries.push_back({"ab", -10});    // base + 3
  entries.push_back({"ba", -10});    // base + 4: same score as "ab": leftmost wins
  entries.push_back({" a", -20});    // base + 5
  entries.push_back({"bab", -1e11f});  // base + 6: below run.c's -1e10 floor, never merges
  auto tok = Llama2cTokenizer::Parse(MakeBin(entries));
  ASSERT_TRUE(tok.ok()) << tok.status();
  // " " + b a b: pairs ( ,b) none, (b,a) -10 at 1, (a,b) -10 at 2 -> merge "ba" first.
  EXPECT_THAT(MustEncode(**tok, "bab", false),
              ElementsAreArray({base + 0, base + 4, base + 2}));
  // " " + a b a: ( ,a) -20, (a,b) -10 at 1, (b,a) -10 at 2 -> "ab" then " " + "ab" no.
  EXPECT_THAT(MustEncode(**tok, "aba", true),
              ElementsAreArray({1, base + 0, base + 3, base + 1}));
  // Unknown codepoint: its UTF-8 bytes + 3. Lone continuation byte: byte fallback too.
  EXPECT_THAT(MustEncode(**tok, "\xC3\xA9", false),
              ElementsAreArray({base + 0, 0xC3 + 3, 0xA9 + 3}));
  EXPECT_THAT(MustEncode(**tok, "\x80", false), ElementsAreArray({base + 0, 0x80 + 3}));
  EXPECT_EQ((*tok)->Decode(MustEncode(**tok, "abba", true)), "abba");
  EXPECT_EQ((*tok)->Decode(std::vector<int32_t>{1, base + 5, 2}), "a");  // space after BOS dropped
  EXPECT_EQ((*tok)->Decode(std::vector<int32_t>{base + 1, base + 5}), "a a");
}

TEST(Llama2cTokenizerTest, GenesisEncodesFast) {
  REQUIRE_SHARED(bin, "models/stories260K/tok512.bin");
  REQUIRE_SHARED(genesis_path, "text/kjv_genesis.txt");
  auto tok = MustLoad(bin);
  ASSERT_NE(tok, nullptr);
  const std::string genesis = ReadAll(genesis_path);
  const auto start = std::chrono::steady_clock::now();
  const auto ids = MustEncode(*tok, genesis, true);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"text\": \"kjv_genesis\", \"bytes\": %zu, \"num_tokens\": %zu, \"seconds\": %.3f}\n",
              genesis.size(), ids.size(), seconds);
  EXPECT_GT(ids.size(), 80000u);
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(tok->Decode(ids), genesis);
}

TEST(Llama2cTokenizerTest, MalformedFilesGiveClearErrors) {
  std::vector<std::pair<std::string, float>> entries = {{"<unk>", 0}, {"abc", -1}};
  const std::string good = MakeBin(entries);
  ASSERT_TRUE(Llama2cTokenizer::Parse(good).ok());
  for (size_t cut : {size_t{0}, size_t{2}, size_t{6}, good.size() - 1, good.size() - 5}) {
    auto t = Llama2cTokenizer::Parse(good.substr(0, cut));
    ASSERT_FALSE(t.ok()) << "cut " << cut;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(std::string(Llama2cTokenizer::Parse(good.substr(0, good.size() - 1))
                              .status().message()),
              HasSubstr("truncated at entry 1"));
  std::string bad_len = good;
  const int32_t huge = 1 << 30;
  std::memcpy(bad_len.data() + 4 + 4, &huge, 4);
  EXPECT_THAT(std::string(Llama2cTokenizer::Parse(bad_len).status().message()),
              HasSubstr("length"));
  std::string bad_max = good;
  const int32_t negative = -5;
  std::memcpy(bad_max.data(), &negative, 4);
  EXPECT_FALSE(Llama2cTokenizer::Parse(bad_max).ok());
  // A vocabulary without byte pieces cannot encode unknown characters.
  auto small = Llama2cTokenizer::Parse(good);
  auto r = (*small)->Encode("xyz", false);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // Missing files.
  EXPECT_EQ(Tokenizer::Load("/nonexistent/tok.bin").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Llama2cTokenizerTest, TruncatedRealFileIsRejected) {
  REQUIRE_SHARED(bin, "models/stories260K/tok512.bin");
  const std::string bytes = ReadAll(bin);
  for (size_t cut : {size_t{3}, size_t{100}, bytes.size() / 2 + 1, bytes.size() - 2}) {
    auto t = Llama2cTokenizer::Parse(bytes.substr(0, cut));
    if (t.ok()) {
      EXPECT_LT((*t)->vocab_size(), 512) << "cut at an entry boundary: fewer pieces";
    } else {
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
    }
  }
}

TEST(TokenizerTest, FindNextToModel) {
  REQUIRE_SHARED(model, "models/stories260K/stories260K.bin");
  auto found = Tokenizer::FindNextToModel(model);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_THAT(*found, ::testing::EndsWith("tok512.bin"));
  auto from_dir =
      Tokenizer::FindNextToModel(::kvfold::testing::SharedDir() + "/models/stories260K");
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  EXPECT_EQ(*from_dir, *found);
  EXPECT_EQ(Tokenizer::FindNextToModel("/nonexistent-dir/model.bin").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TokenizerTest, FindNextToModelPreferenceOrder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kvfold_find_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto touch = [&](const char* name) { std::ofstream(dir / name) << "x"; };
  touch("model.safetensors");
  touch("tok4096.bin");
  touch("tok512.bin");
  EXPECT_EQ(*Tokenizer::FindNextToModel((dir / "model.safetensors").string()),
            (dir / "tok4096.bin").string());  // alphabetical among tok*.bin
  touch("tokenizer.bin");
  EXPECT_EQ(*Tokenizer::FindNextToModel(dir.string()), (dir / "tokenizer.bin").string());
  touch("tokenizer.model");
  EXPECT_EQ(*Tokenizer::FindNextToModel(dir.string()), (dir / "tokenizer.model").string());
  touch("tokenizer.json");
  EXPECT_EQ(*Tokenizer::FindNextToModel(dir.string()), (dir / "tokenizer.json").string());
  // Load of a directory resolves the same file (here a 1-byte fake: a clear error).
  auto bad = Tokenizer::Load(dir.string());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("tokenizer.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvfold
