// HF tokenizer.json: a hand-built byte-level BPE file (Llama-3 layout) with ids worked
// out by hand, a SentencePiece-style file derived from Llama-2's .model and cross-checked
// against libsentencepiece on real text, streaming, and malformed files.
#include "inference_svc/tokenizer/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/tokenizer/pretokenizer.h"
#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"
#include "inference_svc/tokenizer/string_map.h"
#include "tests/inference_svc/tokenizer/sentencepiece_reference.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

using json = nlohmann::json;
using ::kvfold::testing::ByteChar;
using ::kvfold::testing::FirstStories;
using ::kvfold::testing::ReadAll;
using ::kvfold::testing::SharedFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A Llama-3-shaped byte-level tokenizer.json: ids 0..255 are the byte characters (id ==
// byte value), then a few merges, then the special tokens.
json ByteLevelJson(const char* regex = tokenizer_internal::kLlama3Regex,
                   bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  const std::string G = ByteChar(' ');  // "Ġ"
  const std::vector<std::pair<std::string, std::string>> merges = {
      {G, "t"}, {"h", "e"}, {G + "t", "he"}, {"l", "o"}, {"e", "l"}, {"H", "el"},
      {"Hel", "lo"}, {"l", "l"}};
  json merge_list = json::array();
  int next_id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next_id++;  // 256 Ġt, 257 he, 258 Ġthe, 259 lo, 260 el, 261 Hel, 262 Hello, 263 ll
    merge_list.push_back(a + " " + b);
  }
  vocab[G + "hello"] = 266;  // reachable only through ignore_merges
  json added = json::array();
  added.push_back({{"id", 264}, {"content", "<|begin_of_text|>"}, {"special", true}});
  added.push_back({{"id", 265}, {"content", "<|end_of_text|>"}, {"special", true}});
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"},
                 {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                 {"use_regex", false}}}}};
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
            {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", ignore_merges},
            {"vocab", vocab}, {"merges", merge_list}}}};
}

std::unique_ptr<HfTokenizer> MustParse(const json& j) {
  auto t = HfTokenizer::Parse(j.dump(), "");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int32_t> Enc(const Tokenizer& t, std::string_view text, bool bos = false) {
  auto ids = t.Encode(text, bos);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(HfTokenizerTest, ByteLevelMergesByRank) {
  auto tok = MustParse(ByteLevelJson());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 267);
  EXPECT_EQ(tok->bos_id(), 264);
  EXPECT_EQ(tok->eos_id(), 265);
  // "Hello": lo(3) < el(4) < Hel(5) < Hello(6). " the": Ġt(0), he(1), Ġthe(2).
  // " hello": he(1), then lo(3); Ġ+he and l+lo have no merge.
  EXPECT_THAT(Enc(*tok, "Hello the hello"), ElementsAre(262, 258, ' ', 257, 'l', 259));
  EXPECT_THAT(Enc(*tok, "Hello", true), ElementsAre(264, 262));
  // Special tokens are matched before pre-tokenization and BPE.
  EXPECT_THAT(Enc(*tok, "Hello<|end_of_text|> the"), ElementsAre(262, 265, 258));
  EXPECT_EQ(tok->Decode(Enc(*tok, "Hello<|end_of_text|> the", true)), "Hello the");
  EXPECT_TRUE(tok->IsSpecial(265));
  EXPECT_EQ(tok->TokenBytes(258), " the");
  EXPECT_FALSE(tok->StartsWithDummySpace(258));
  // Every byte has a character: arbitrary bytes round-trip.
  const std::string all = "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80\n\ttabs  end ";
  EXPECT_EQ(tok->Decode(Enc(*tok, all, true)), all);
}

TEST(HfTokenizerTest, IgnoreMergesTakesWholeWords) {
  auto tok = MustParse(ByteLevelJson(tokenizer_internal::kLlama3Regex, true));
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(Enc(*tok, "Hello the hello"), ElementsAre(262, 258, 266));
}

TEST(HfTokenizerTest, Gpt2AndQwen2Patterns) {
  auto gpt2 = MustParse(ByteLevelJson(tokenizer_internal::kGpt2Regex));
  auto qwen2 = MustParse(ByteLevelJson(tokenizer_internal::kQwen2Regex));
  ASSERT_NE(gpt2, nullptr);
  ASSERT_NE(qwen2, nullptr);
  EXPECT_THAT(Enc(*gpt2, " 12"), ElementsAre(' ', '1', '2'));
  EXPECT_THAT(Enc(*qwen2, "x 12"), ElementsAre('x', ' ', '1', '2'));
}

TEST(HfTokenizerTest, StreamingByteTokensNeverBreaksUtf8) {
  auto tok = MustParse(ByteLevelJson());
  ASSERT_NE(tok, nullptr);
  const std::string text =
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE4\xBD\xA0\xE5\xA5\xBD Hello the "
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4";
  const auto ids = Enc(*tok, text, true);
  IncrementalDecoder decoder(tok.get());
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = decoder.Push(id);
    std::string pending = piece, valid;
    DrainUtf8(&pending, false, &valid);
    EXPECT_EQ(valid, piece) << "token " << id << " produced invalid UTF-8";
    streamed += piece;
  }
  streamed += decoder.Flush();
  EXPECT_EQ(streamed, text);
}

// tokenizer.json in Llama-2's layout, derived from the SentencePiece model the way HF's
// converter does: vocab from the pieces, merges = every split of a piece into two pieces,
// ordered by the merged piece's score (then by the ids of the halves).
json DeriveLlama2Json(const SentencePieceTokenizer& sp, bool metaspace_pre_tokenizer) {
  json vocab = json::object();
  std::vector<std::tuple<float, int32_t, int32_t, int32_t>> merges;  // -score, id, l, r
  tokenizer_internal::StringMap<int32_t> ids;
  for (int32_t id = 0; id < sp.vocab_size(); ++id) ids[sp.piece(id)] = id;
  for (int32_t id = 0; id < sp.vocab_size(); ++id) {
    const std::string& piece = sp.piece(id);
    vocab[piece] = id;
    if (sp.IsSpecial(id) || sp.IsByte(id) || id == 0) continue;
    for (size_t cut = 1; cut < piece.size(); ++cut) {
      if ((static_cast<unsigned char>(piece[cut]) & 0xC0) == 0x80) continue;  // mid-codepoint
      auto l = ids.find(std::string_view(piece).substr(0, cut));
      auto r = ids.find(std::string_view(piece).substr(cut));
      if (l == ids.end() || r == ids.end()) continue;
      merges.emplace_back(-sp.score(id), id, l->second, r->second);
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
    return std::make_pair(std::get<2>(a), std::get<3>(a)) <
           std::make_pair(std::get<2>(b), std::get<3>(b));
  });
  json merge_list = json::array();
  for (const auto& m : merges) merge_list.push_back({sp.piece(std::get<2>(m)), sp.piece(std::get<3>(m))});
  json added = json::array();
  for (int id : {0, 1, 2}) {
    added.push_back({{"id", id}, {"content", sp.piece(id)}, {"special", true},
                     {"normalized", false}});
  }
  const std::string meta = "\xE2\x96\x81";
  json normalizer = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", meta}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}}}};
  json pre = nullptr;
  if (metaspace_pre_tokenizer) {
    normalizer = nullptr;
    pre = {{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", "first"},
           {"split", false}};
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
          {"decoder", nullptr},
          {"model",
           {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true},
            {"byte_fallback", true}, {"vocab", vocab}, {"merges", merge_list}}}};
}

TEST(HfTokenizerTest, DerivedLlama2MatchesLibSentencePiece) {
  const std::string model = SharedFile("models/tokenizers/llama2_32000.model");
  const std::string stories = SharedFile("text/tinystories_train_sample.txt");
  const std::string genesis_path = SharedFile("text/kjv_genesis.txt");
  if (model.empty() || stories.empty() || genesis_path.empty()) {
    GTEST_SKIP() << "shared files not found under " << ::kvfold::testing::SharedDir();
  }
  auto sp = SentencePieceTokenizer::Parse(ReadAll(model));
  ASSERT_TRUE(sp.ok()) << sp.status();
  auto ref = ::kvfold::testing::SentencePieceReference::LoadFile(model);  // libsentencepiece
  ASSERT_NE(ref, nullptr);
  std::vector<std::string> texts = FirstStories(ReadAll(stories), 50);
  const std::string genesis = ReadAll(genesis_path);
  texts.push_back(genesis.substr(0, 20000));
  texts.push_back("Grüße aus Köln, café naïve, Ελληνικά, русский текст, 中文文本, "
                  "日本語のテキスト, 한국어, emoji \xF0\x9F\x8E\x89\xF0\x9F\x91\x8D!  two  spaces\n\n");
  for (bool metaspace : {false, true}) {
    // Written to a directory and loaded through Tokenizer::Load, like a real file.
    const auto dir = std::filesystem::temp_directory_path() /
                     ("kvfold_tok_" + std::to_string(::getpid()) + (metaspace ? "_m" : "_n"));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "tokenizer.json") << DeriveLlama2Json(**sp, metaspace).dump();
    auto hf = Tokenizer::Load(dir.string());
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(hf.ok()) << hf.status();
    EXPECT_EQ((*hf)->bos_id(), 1);
    EXPECT_EQ((*hf)->eos_id(), 2);
    int mismatches = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto a = Enc(**hf, texts[i], true);
      const auto b = ref->EncodeIds(texts[i], true);
      if (a != b) ++mismatches;
      EXPECT_EQ(a, b) << "text " << i << (metaspace ? " (Metaspace)" : " (normalizers)");
      EXPECT_EQ((*hf)->Decode(a), ref->DecodeIds({b.begin(), b.end()}));
    }
    EXPECT_EQ(mismatches, 0);
  }
  // Metaspace with split=true cuts words at every U+2581, so pieces spanning two spaces
  // ("▁▁") cannot form; on text without double spaces it must still match.
  json split = DeriveLlama2Json(**sp, true);
  split["pre_tokenizer"]["split"] = true;
  auto hf_split = HfTokenizer::Parse(split.dump(), "");
  ASSERT_TRUE(hf_split.ok()) << hf_split.status();
  int compared = 0;
  for (const auto& text : texts) {
    if (text.find("  ") != std::string::npos) continue;
    EXPECT_EQ(Enc(**hf_split, text, true), ref->EncodeIds(text, true));
    ++compared;
  }
  EXPECT_GT(compared, 40);
}

TEST(HfTokenizerTest, TokenizerConfigAndNonSpecialAddedTokens) {
  json j = ByteLevelJson();
  j["added_tokens"].push_back({{"id", 267}, {"content", "<extra>"}, {"special", false}});
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvfold_tokcfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  // Deliberately unusual choices, to prove tokenizer_config.json wins over the template.
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": {"content": "<|end_of_text|>"}, "eos_token": "<extra>"})";
  auto tok = Tokenizer::Load((dir / "tokenizer.json").string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 265);
  EXPECT_EQ((*tok)->eos_id(), 267);
  EXPECT_EQ((*tok)->vocab_size(), 268);
  // A non-special added token is matched before BPE and decodes to its text.
  EXPECT_THAT(Enc(**tok, "Hello<extra> the"), ElementsAre(262, 267, 258));
  EXPECT_FALSE((*tok)->IsSpecial(267));
  EXPECT_EQ((*tok)->Decode(Enc(**tok, "Hello<extra> the", true)), "Hello<extra> the");
}

TEST(HfTokenizerTest, MalformedFilesGiveClearErrors) {
  auto expect_error = [](const std::string& text, absl::StatusCode code, const char* needle) {
    auto t = HfTokenizer::Parse(text, "");
    ASSERT_FALSE(t.ok()) << text.substr(0, 80);
    EXPECT_EQ(t.status().code(), code) << t.status();
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(needle));
  };
  const std::string good = ByteLevelJson().dump();
  expect_error(good.substr(0, good.size() / 2), absl::StatusCode::kInvalidArgument,
               "not valid JSON");
  expect_error("[1, 2, 3]", absl::StatusCode::kInvalidArgument, "not an object");
  expect_error("{}", absl::StatusCode::kInvalidArgument, "model");
  json j = ByteLevelJson();
  j["model"]["merges"].push_back("zz qq");
  expect_error(j.dump(), absl::StatusCode::kInvalidArgument, "not in vocab");
  j = ByteLevelJson();
  j["model"]["vocab"]["x"] = "seven";
  expect_error(j.dump(), absl::StatusCode::kInvalidArgument, "not an integer");
  j = ByteLevelJson();
  j["model"]["type"] = "WordPiece";
  expect_error(j.dump(), absl::StatusCode::kUnimplemented, "WordPiece");
  j = ByteLevelJson("\\w+|\\s+");
  expect_error(j.dump(), absl::StatusCode::kUnimplemented, "regex");
  j = ByteLevelJson();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_error(j.dump(), absl::StatusCode::kUnimplemented, "Lowercase");
  j = ByteLevelJson();
  j["added_tokens"].push_back({{"content", "<x>"}});
  expect_error(j.dump(), absl::StatusCode::kInvalidArgument, "added_tokens");
}

TEST(HfTokenizerTest, NoByteFallbackNoUnkIsAnError) {
  json j = ByteLevelJson();
  j["pre_tokenizer"] = nullptr;  // no byte-level mapping: raw characters must be in vocab
  j["decoder"] = nullptr;
  auto tok = MustParse(j);
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(Enc(*tok, "Hello"), ElementsAre(262));
  auto r = tok->Encode("\xE6\x97\xA5", false);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvfold
