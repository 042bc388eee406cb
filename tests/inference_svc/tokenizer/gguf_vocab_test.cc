// The vocabulary inside a GGUF file: a SentencePiece model's pieces, scores and types
// written as llama.cpp writes them encode real text exactly as the model does under
// Llama's normalizer (the stories260K and Llama-2 vocabularies); Tokenizer::Load and
// FindNextToModel take the GGUF file itself; malformed and unread vocabularies are precise errors.
#include "inference_svc/tokenizer/gguf_vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference_svc/tokenizer/chat_template.h"
#include "inference_svc/tokenizer/hf_tokenizer.h"
#include "inference_svc/tokenizer/pretokenizer.h"
#include "inference_svc/tokenizer/sentencepiece_model.h"
#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"
#include "tests/inference_svc/model/gguf_writer.h"
#include "tests/inference_svc/tokenizer/sentencepiece_reference.h"
#include "tests/inference_svc/tokenizer/test_util.h"

namespace kvfold {
namespace {

namespace fs = std::filesystem;
using ::kvfold::testing::FirstStories;
using ::kvfold::testing::GgufWriter;
using ::kvfold::testing::ReadAll;
using ::kvfold::testing::SentencePieceReference;
using ::kvfold::testing::SharedFile;
using ::testing::HasSubstr;
using M = tokenizer_internal::SentencePieceModelProto;

// A GGUF file holding `model`'s vocabulary as llama.cpp's converters write one.
GgufWriter VocabularyOf(const M& model, int bos, int eos) {
  GgufWriter w;
  w.String("general.architecture", "llama");
  ::kvfold::testing::AddSentencePieceVocabulary(model, &w);
  w.U32("tokenizer.ggml.bos_token_id", bos);
  w.U32("tokenizer.ggml.eos_token_id", eos);
  return w;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> FromBytes(const std::string& bytes) {
  auto file = gguf::Parse(bytes, "vocab.gguf");
  if (!file.ok()) return file.status();
  return GgufTokenizer(*file, "vocab.gguf");
}

class GgufVocabularyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVocabularyTest, EncodesRealTextAsItsSentencePieceModel) {
  const std::string path = SharedFile(GetParam());
  const std::string stories = SharedFile("text/tinystories_train_sample.txt");
  const std::string genesis = SharedFile("text/kjv_genesis.txt");
  if (path.empty() || stories.empty() || genesis.empty()) GTEST_SKIP() << "shared files not found";
  const std::string bytes = ReadAll(path);
  auto model = tokenizer_internal::ParseSentencePieceModel(bytes);
  ASSERT_TRUE(model.ok());
  // GGUF keeps no remove_extra_whitespaces: a GGUF vocabulary keeps whitespace, as
  // Llama's models do (llama2_32000.model) and llama.cpp does; stories260K's model removes
  // extra whitespace, so its reference here is the same model keeping it.
  if (std::string(GetParam()).find("llama2") != std::string::npos) {
    EXPECT_FALSE(model->remove_extra_whitespaces);
  }
  M reference = *model;
  reference.remove_extra_whitespaces = false;
  auto sp = SentencePieceTokenizer::FromModel(reference);
  ASSERT_TRUE(sp.ok()) << sp.status();
  auto gguf = FromBytes(VocabularyOf(*model, (*sp)->bos_id(), (*sp)->eos_id()).Bytes());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  ASSERT_EQ((*gguf)->vocab_size(), (*sp)->vocab_size());
  EXPECT_EQ((*gguf)->bos_id(), (*sp)->bos_id());
  EXPECT_EQ((*gguf)->eos_id(), (*sp)->eos_id());
  std::vector<std::string> texts = FirstStories(ReadAll(stories), 200);
  texts.push_back(ReadAll(genesis).substr(0, 50000));
  texts.push_back("  two  inner   spaces, tabs\tand\nlines; caf\xC3\xA9 \xF0\x9F\x98\x80 \xFF");
  size_t tokens = 0;
  for (const std::string& text : texts) {
    auto want = (*sp)->Encode(text, true);
    auto got = (*gguf)->Encode(text, true);
    ASSERT_TRUE(want.ok() && got.ok());
    ASSERT_EQ(*got, *want) << text.substr(0, 80);
    EXPECT_EQ((*gguf)->Decode(*got), (*sp)->Decode(*want));
    tokens += got->size();
  }
  EXPECT_GT(tokens, 10000u);
}

// A vocabulary written as a .model file (what `kvfold convert` writes for a GGUF source)
// reads back with the same fields, and libsentencepiece loads it and encodes real text as
// it encodes the original file.
TEST_P(GgufVocabularyTest, WrittenAsAModelFileItIsTheSameModel) {
  const std::string path = SharedFile(GetParam());
  const std::string stories = SharedFile("text/tinystories_train_sample.txt");
  if (path.empty() || stories.empty()) GTEST_SKIP() << "shared files not found";
  auto model = tokenizer_internal::ParseSentencePieceModel(ReadAll(path));
  ASSERT_TRUE(model.ok());
  const std::string written = tokenizer_internal::SerializeSentencePieceModel(*model);
  auto back = tokenizer_internal::ParseSentencePieceModel(written);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->pieces.size(), model->pieces.size());
  for (size_t i = 0; i < model->pieces.size(); ++i) {
    ASSERT_EQ(back->pieces[i].piece, model->pieces[i].piece) << i;
    ASSERT_EQ(back->pieces[i].score, model->pieces[i].score) << i;
    ASSERT_EQ(back->pieces[i].type, model->pieces[i].type) << i;
  }
  EXPECT_EQ(back->add_dummy_prefix, model->add_dummy_prefix);
  EXPECT_EQ(back->remove_extra_whitespaces, model->remove_extra_whitespaces);
  EXPECT_EQ(back->byte_fallback, model->byte_fallback);
  EXPECT_EQ(back->bos_piece, model->bos_piece);
  std::string error;
  auto reference = SentencePieceReference::Load(written, &error);
  ASSERT_NE(reference, nullptr) << error;
  auto original = SentencePieceReference::LoadFile(path);
  ASSERT_NE(original, nullptr);
  EXPECT_EQ(reference->bos_id(), original->bos_id());
  EXPECT_EQ(reference->eos_id(), original->eos_id());
  for (const std::string& text : FirstStories(ReadAll(stories), 100)) {
    ASSERT_EQ(reference->EncodeIds(text, true), original->EncodeIds(text, true));
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, GgufVocabularyTest,
                         ::testing::Values("models/stories260K/tok512.model",
                                           "models/tokenizers/llama2_32000.model"));

// A byte-level BPE vocabulary over real words: the 256 byte characters, then for each of
// the most frequent words of `text` (with its leading space, as "Ġword") the merges that
// build it left to right, then special tokens: control "<|begin_of_text|>" and
// "<|eot_id|>", user-defined "<tool>".
struct ByteLevelVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
};

ByteLevelVocab MakeByteLevelVocab(const std::string& text, size_t words) {
  ByteLevelVocab v;
  std::map<std::string, int32_t> ids;
  auto add = [&](const std::string& token, int32_t type) {
    if (ids.count(token)) return;
    ids[token] = static_cast<int32_t>(v.tokens.size());
    v.tokens.push_back(token);
    v.types.push_back(type);
  };
  for (int b = 0; b < 256; ++b) add(::kvfold::testing::ByteChar(b), M::kNormal);
  std::map<std::string, int> counts;
  std::string word;
  for (char c : text + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      word += c;
    } else if (!word.empty()) {
      ++counts[word];
      word.clear();
    }
  }
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [w, n] : counts) by_count.push_back({-n, w});
  std::sort(by_count.begin(), by_count.end());
  for (size_t i = 0; i < std::min(words, by_count.size()); ++i) {
    std::vector<std::string> chars = {::kvfold::testing::ByteChar(' ')};
    for (char c : by_count[i].second) chars.push_back(std::string(1, c));
    std::string built = chars[0];
    for (size_t k = 1; k < chars.size(); ++k) {
      if (!ids.count(built + chars[k])) {
        v.merges.push_back(built + " " + chars[k]);
        add(built + chars[k], M::kNormal);
      }
      built += chars[k];
    }
  }
  add("<|begin_of_text|>", M::kControl);
  add("<|eot_id|>", M::kControl);
  add("<tool>", M::kUserDefined);
  return v;
}

// The same vocabulary as a tokenizer.json (the reference) and as GGUF metadata with
// llama.cpp's name for each pre-tokenizer: the same ids for real text, special tokens and
// the prefix space included; written back as tokenizer.json for a converted directory.
TEST(GgufVocabularyTest, ByteLevelVocabulariesEncodeAsTheirTokenizerJson) {
  const std::string stories = SharedFile("text/tinystories_train_sample.txt");
  const std::string genesis = SharedFile("text/kjv_genesis.txt");
  if (stories.empty() || genesis.empty()) GTEST_SKIP() << "shared files not found";
  const std::string text = ReadAll(stories);
  const ByteLevelVocab v = MakeByteLevelVocab(text.substr(0, 200000), 400);
  std::vector<std::string> texts = FirstStories(text, 100);
  texts.push_back(ReadAll(genesis).substr(0, 30000));
  texts.push_back(
      "<|begin_of_text|>Hi<|eot_id|> <tool>x \t 123456 caf\xC3\xA9 \xF0\x9F\x98\x80 \xFF");
  struct Case {
    const char* pre;
    const char* regex;
    bool ignore_merges;
  };
  for (const Case& c : {Case{"llama-bpe", tokenizer_internal::kLlama3Regex, true},
                        Case{"qwen2", tokenizer_internal::kQwen2Regex, false},
                        Case{"gpt-2", tokenizer_internal::kGpt2Regex, false}}) {
    const char* pre = c.pre;
    const char* regex = c.regex;
    const bool ignore_merges = c.ignore_merges;
    nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
    for (size_t id = 0; id < v.tokens.size(); ++id) {
      if (v.types[id] == M::kNormal) {
        vocab[v.tokens[id]] = id;
      } else {
        added.push_back(
            {{"id", id}, {"content", v.tokens[id]}, {"special", v.types[id] == M::kControl}});
      }
    }
    const nlohmann::json reference = {
        {"added_tokens", added},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model",
         {{"type", "BPE"},
          {"vocab", vocab},
          {"merges", v.merges},
          {"ignore_merges", ignore_merges}}}};
    auto want = HfTokenizer::Parse(reference.dump(), "");
    ASSERT_TRUE(want.ok()) << want.status();
    GgufWriter w;
    w.String("tokenizer.ggml.model", "gpt2");
    w.String("tokenizer.ggml.pre", pre);
    w.Strings("tokenizer.ggml.tokens", v.tokens);
    w.I32s("tokenizer.ggml.token_type", v.types);
    w.Strings("tokenizer.ggml.merges", v.merges);
    w.U32("tokenizer.ggml.bos_token_id", 256 + static_cast<uint32_t>(v.merges.size()));
    w.Bool("tokenizer.ggml.add_bos_token", true);
    const std::string bytes = w.Bytes();
    auto got = FromBytes(bytes);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ((*got)->vocab_size(), (*want)->vocab_size());
    EXPECT_EQ((*got)->bos_id(), 256 + static_cast<int32_t>(v.merges.size())) << pre;
    size_t tokens = 0, multi = 0;
    for (const std::string& t : texts) {
      auto a = (*want)->Encode(t, false);
      auto b = (*got)->Encode(t, true);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(b->front(), (*got)->bos_id());
      ASSERT_EQ(std::vector<int32_t>(b->begin() + 1, b->end()), *a)
          << pre << ": " << t.substr(0, 60);
      EXPECT_EQ((*got)->Decode(*b), (*want)->Decode(*a));
      tokens += a->size();
      for (int32_t id : *a) multi += id >= 256;
    }
    EXPECT_GT(multi, tokens / 4) << pre;  // the merges are used
    // Written for a converted directory: a tokenizer.json that loads as the same tokenizer.
    auto file = gguf::Parse(bytes, "vocab.gguf");
    ASSERT_TRUE(file.ok());
    auto written = GgufVocabularyFile(*file, "vocab.gguf");
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->name, "tokenizer.json");
    auto reread = HfTokenizer::Parse(written->contents, "");
    ASSERT_TRUE(reread.ok()) << reread.status();
    EXPECT_EQ(*(*reread)->Encode(texts[0], true), *(*got)->Encode(texts[0], true));
  }
  GgufWriter unknown;
  unknown.String("tokenizer.ggml.model", "gpt2");
  unknown.String("tokenizer.ggml.pre", "deepseek-llm");
  unknown.Strings("tokenizer.ggml.tokens", v.tokens);
  EXPECT_THAT(FromBytes(unknown.Bytes()).status().message(),
              HasSubstr("pre-tokenizer 'deepseek-llm'"));
  // Tokens that are not UTF-8: an error, not an exception.
  std::vector<std::string> broken = v.tokens;
  broken[300] = "\xFF\xFE";
  GgufWriter not_utf8;
  not_utf8.String("tokenizer.ggml.model", "gpt2");
  not_utf8.String("tokenizer.ggml.pre", "qwen2");
  not_utf8.Strings("tokenizer.ggml.tokens", broken);
  not_utf8.Strings("tokenizer.ggml.merges", v.merges);
  // (Token 300 is a merge's result: the merge now names a piece the vocabulary lacks.)
  const absl::Status not_utf8_status = FromBytes(not_utf8.Bytes()).status();
  EXPECT_EQ(not_utf8_status.code(), absl::StatusCode::kInvalidArgument) << not_utf8_status;
  EXPECT_THAT(not_utf8_status.message(), HasSubstr("not in vocab"));
  GgufWriter no_merges;
  no_merges.String("tokenizer.ggml.model", "gpt2");
  no_merges.String("tokenizer.ggml.pre", "qwen2");
  no_merges.Strings("tokenizer.ggml.tokens", v.tokens);
  EXPECT_THAT(FromBytes(no_merges.Bytes()).status().message(), HasSubstr("tokenizer.ggml.merges"));
}

M SmallModel() {
  M m;
  m.model_type = M::kBpe;
  m.pieces = {{"<unk>", 0, M::kUnknown}, {"<s>", 0, M::kControl}, {"</s>", 0, M::kControl}};
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    m.pieces.push_back({piece, 0, M::kByte});
  }
  for (const char* p : {"\xE2\x96\x81h", "i", "\xE2\x96\x81hi"})
    m.pieces.push_back({p, -1, M::kNormal});
  m.pieces.back().score = 0;
  return m;
}

TEST(GgufVocabularyTest, LoadsFromTheModelFileItself) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gguf_vocab_load";
  fs::create_directories(dir);
  const fs::path file = dir / "model.gguf";
  std::ofstream(file, std::ios::binary) << VocabularyOf(SmallModel(), 1, 2).Bytes();
  std::ofstream(dir / "tokenizer.bin", std::ios::binary) << "not this one";
  auto found = Tokenizer::FindNextToModel(file.string());
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, file.string());
  auto tok = Tokenizer::Load(file.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("hi hi", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 261, 261}));
  EXPECT_EQ((*tok)->Decode(*ids), "hi hi");
  fs::remove_all(dir);
}

// A GGUF file's tokenizer.chat_template picks the family as tokenizer_config.json's
// would (here Llama 2's [INST] with <<SYS>>); without one the family is plain.
TEST(GgufVocabularyTest, TheChatTemplateComesFromTheFile) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gguf_vocab_template";
  fs::create_directories(dir);
  GgufWriter with_template = VocabularyOf(SmallModel(), 1, 2);
  with_template.String("tokenizer.chat_template",
                       "{{ bos_token }}[INST] <<SYS>>{{ messages[0]['content'] }}<</SYS>> [/INST]");
  const fs::path llama2 = dir / "llama2.gguf", plain = dir / "plain.gguf";
  std::ofstream(llama2, std::ios::binary) << with_template.Bytes();
  std::ofstream(plain, std::ios::binary) << VocabularyOf(SmallModel(), 1, 2).Bytes();
  for (const auto& [file, family] : {std::pair{llama2, "llama2"}, std::pair{plain, "plain"}}) {
    auto tok = Tokenizer::Load(file.string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    auto chat = ChatTemplate::ForModel(file.string(), "", tok->get());
    ASSERT_TRUE(chat.ok()) << chat.status();
    EXPECT_EQ(chat->name(), family);
  }
  fs::remove_all(dir);
}

// What `kvfold convert` writes for a GGUF source: tokenizer.model and tokenizer_config.json
// that load, next to the converted weights, as the GGUF file's own tokenizer and template.
TEST(GgufVocabularyTest, WrittenAsTokenizerFilesForAConvertedDirectory) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gguf_vocab_files";
  fs::create_directories(dir);
  GgufWriter w = VocabularyOf(SmallModel(), 1, 2);
  w.String("tokenizer.chat_template", "[INST] <<SYS>> {{ bos_token }} [/INST]");
  const std::string bytes = w.Bytes();
  auto file = gguf::Parse(bytes, "vocab.gguf");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(WriteGgufTokenizerFiles(*file, "vocab.gguf", dir.string()).ok());
  auto from_files = Tokenizer::Load(dir.string());
  auto from_gguf = FromBytes(bytes);
  ASSERT_TRUE(from_files.ok() && from_gguf.ok()) << from_files.status();
  for (const char* text : {"hi hi", " h  i\n", "\xC3\xA9"}) {
    EXPECT_EQ(*(*from_files)->Encode(text, true), *(*from_gguf)->Encode(text, true)) << text;
  }
  auto chat = ChatTemplate::ForModel(dir.string(), "", from_files->get());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->name(), "llama2");
  GgufWriter gpt2;
  gpt2.String("tokenizer.ggml.model", "gpt2");
  auto unread = gguf::Parse(gpt2.Bytes(), "gpt2.gguf");
  ASSERT_TRUE(unread.ok());
  EXPECT_EQ(WriteGgufTokenizerFiles(*unread, "gpt2.gguf", dir.string()).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(WriteGgufTokenizerFiles(*file, "vocab.gguf", (dir / "missing" / "x").string()).code(),
            absl::StatusCode::kInternal);
  fs::remove_all(dir);
}

TEST(GgufVocabularyTest, MalformedOrUnreadVocabulariesArePreciseErrors) {
  auto error = [](const GgufWriter& w) { return FromBytes(w.Bytes()).status(); };
  GgufWriter bpe;
  bpe.String("tokenizer.ggml.model", "gpt2");
  EXPECT_EQ(error(bpe).code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(error(bpe).message(), HasSubstr("tokenizer.json"));
  EXPECT_THAT(error(GgufWriter()).message(), HasSubstr("holds no tokenizer"));
  GgufWriter no_tokens;
  no_tokens.String("tokenizer.ggml.model", "llama");
  EXPECT_THAT(error(no_tokens).message(), HasSubstr("tokenizer.ggml.tokens"));
  GgufWriter short_scores = VocabularyOf(SmallModel(), 1, 2);
  short_scores.F32s("tokenizer.ggml.scores", {0.5f});  // a second key of that name
  EXPECT_THAT(error(short_scores).message(), HasSubstr("appears twice"));
  M typed = SmallModel();
  GgufWriter bad_type = VocabularyOf(typed, 1, 2);
  bad_type.I32s("tokenizer.ggml.token_type_extra", {9});
  EXPECT_TRUE(FromBytes(bad_type.Bytes()).ok());  // unknown keys are ignored
  GgufWriter bos = VocabularyOf(SmallModel(), 100000, 2);
  EXPECT_THAT(error(bos).message(), HasSubstr("bos_token_id is not a token id"));
  // Lengths that disagree and types out of range, written field by field.
  GgufWriter mismatch;
  mismatch.String("tokenizer.ggml.model", "llama");
  mismatch.Strings("tokenizer.ggml.tokens", {"<unk>", "a"});
  mismatch.F32s("tokenizer.ggml.scores", {0});
  EXPECT_THAT(error(mismatch).message(), HasSubstr("array of 2 numbers"));
  GgufWriter out_of_range;
  out_of_range.String("tokenizer.ggml.model", "llama");
  out_of_range.Strings("tokenizer.ggml.tokens", {"<unk>", "a"});
  out_of_range.I32s("tokenizer.ggml.token_type", {2, 9});
  EXPECT_THAT(error(out_of_range).message(), HasSubstr("token 1 has type 9"));
}

}  // namespace
}  // namespace kvfold
