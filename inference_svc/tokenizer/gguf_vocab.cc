#include "inference_svc/tokenizer/gguf_vocab.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "inference_svc/tokenizer/hf_tokenizer.h"
#include "inference_svc/tokenizer/pretokenizer.h"
#include "inference_svc/tokenizer/sentencepiece_model.h"
#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"

namespace kvfold {
namespace {

using M = tokenizer_internal::SentencePieceModelProto;

}  // namespace

nlohmann::json GgufTokenizerConfig(const gguf::File& file) {
  nlohmann::json config = nlohmann::json::object();
  if (const gguf::Value* t = file.Find("tokenizer.chat_template");
      t != nullptr && t->type == gguf::ValueType::kString) {
    config["chat_template"] = t->string;
  }
  const gguf::Value* tokens = file.Find("tokenizer.ggml.tokens");
  for (auto [key, name] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                           std::pair{"tokenizer.ggml.eos_token_id", "eos_token"}}) {
    const gguf::Value* id = file.Find(key);
    if (tokens != nullptr && id != nullptr && id->is_integer() && id->integer >= 0 &&
        static_cast<size_t>(id->integer) < tokens->strings.size()) {
      config[name] = tokens->strings[id->integer];
    }
  }
  return config;
}

namespace {

absl::Status Bad(const std::string& what, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": GGUF vocabulary: ", message));
}

// The file's tokens and their types (1, normal, when the file gives none).
struct Tokens {
  const std::vector<std::string>* pieces = nullptr;
  std::vector<int> types;
  const std::vector<double>* scores = nullptr;  // null: none given
};

absl::StatusOr<Tokens> TokensOf(const gguf::File& file, const std::string& what) {
  const gguf::Value* tokens = file.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type != gguf::ValueType::kArray ||
      tokens->element_type != gguf::ValueType::kString || tokens->strings.empty()) {
    return Bad(what, "tokenizer.ggml.tokens must be a non-empty array of strings");
  }
  const size_t n = tokens->strings.size();
  auto numbers = [&](const char* key) -> absl::StatusOr<const std::vector<double>*> {
    const gguf::Value* v = file.Find(key);
    if (v == nullptr) return nullptr;
    if (v->type != gguf::ValueType::kArray || v->numbers.size() != n) {
      return Bad(what, absl::StrCat(key, " must be an array of ", n, " numbers (one per token)"));
    }
    return &v->numbers;
  };
  Tokens out;
  out.pieces = &tokens->strings;
  auto scores = numbers("tokenizer.ggml.scores");
  if (!scores.ok()) return scores.status();
  out.scores = *scores;
  auto types = numbers("tokenizer.ggml.token_type");
  if (!types.ok()) return types.status();
  out.types.assign(n, M::kNormal);
  for (size_t id = 0; *types != nullptr && id < n; ++id) {
    // GGUF token types are SentencePiece's (0 = undefined is read as normal).
    const double type = (**types)[id];
    if (!(type >= 0 && type <= static_cast<double>(M::kByte)) || type != static_cast<int>(type)) {
      return Bad(what, absl::StrCat("token ", id, " has type ", type, " (0..6)"));
    }
    out.types[id] = type == 0 ? M::kNormal : static_cast<int>(type);
  }
  return out;
}

// A "llama" vocabulary as a SentencePiece model with Llama's normalizer.
absl::StatusOr<M> SentencePieceModelOf(const gguf::File& file, const std::string& what) {
  auto tokens = TokensOf(file, what);
  if (!tokens.ok()) return tokens.status();
  const size_t n = tokens->pieces->size();
  M m;
  m.model_type = M::kBpe;
  m.normalizer_name = "identity";
  m.add_dummy_prefix = true;
  m.remove_extra_whitespaces = false;
  if (const gguf::Value* v = file.Find("tokenizer.ggml.add_space_prefix"); v != nullptr) {
    m.add_dummy_prefix = v->integer != 0;
  }
  m.pieces.resize(n);
  for (size_t id = 0; id < n; ++id) {
    M::Piece& p = m.pieces[id];
    p.piece = (*tokens->pieces)[id];
    p.score = tokens->scores == nullptr ? 0.0f : static_cast<float>((*tokens->scores)[id]);
    p.type = static_cast<M::PieceType>(tokens->types[id]);
    if (p.type == M::kByte) m.byte_fallback = true;
  }
  for (auto [key, piece] : {std::pair{"tokenizer.ggml.bos_token_id", &m.bos_piece},
                            std::pair{"tokenizer.ggml.eos_token_id", &m.eos_piece}}) {
    const gguf::Value* v = file.Find(key);
    if (v == nullptr) {
      piece->clear();
      continue;
    }
    if (!v->is_integer() || v->integer < 0 || static_cast<size_t>(v->integer) >= n) {
      return Bad(what, absl::StrCat(key, " is not a token id in [0, ", n, ")"));
    }
    *piece = (*tokens->pieces)[v->integer];
  }
  return m;
}

// The pre-tokenizer of a "gpt2" vocabulary by llama.cpp's name for it
// (`tokenizer.ggml.pre`), and whether its tokenizer.json ignores merges for whole words.
struct BytePre {
  const char* regex;
  bool ignore_merges;
};
std::optional<BytePre> BytePreOf(std::string_view pre) {
  if (pre == "llama-bpe") return BytePre{tokenizer_internal::kLlama3Regex, true};
  if (pre == "qwen2") return BytePre{tokenizer_internal::kQwen2Regex, false};
  if (pre == "gpt-2") return BytePre{tokenizer_internal::kGpt2Regex, false};
  return std::nullopt;
}

// A "gpt2" (byte-level BPE) vocabulary as the tokenizer.json it came from: the normal
// tokens and the merges in the model, control and user-defined tokens as added tokens, the
// pre-tokenizer of `tokenizer.ggml.pre`, BOS before the text when
// `tokenizer.ggml.add_bos_token` says so.
absl::StatusOr<nlohmann::json> ByteLevelJsonOf(const gguf::File& file, const std::string& what) {
  using json = nlohmann::json;
  const gguf::Value* pre = file.Find("tokenizer.ggml.pre");
  const std::string pre_name =
      pre != nullptr && pre->type == gguf::ValueType::kString ? pre->string : "";
  const std::optional<BytePre> split = BytePreOf(pre_name);
  if (!split.has_value()) {
    return absl::UnimplementedError(absl::StrCat(
        what, ": GGUF vocabulary: pre-tokenizer '", pre_name,
        "' (kvfold reads llama-bpe, qwen2 and gpt-2; put the model's tokenizer.json next to "
        "the file)"));
  }
  auto tokens = TokensOf(file, what);
  if (!tokens.ok()) return tokens.status();
  const gguf::Value* merges = file.Find("tokenizer.ggml.merges");
  if (merges == nullptr || merges->type != gguf::ValueType::kArray ||
      merges->element_type != gguf::ValueType::kString) {
    return Bad(what, "tokenizer.ggml.merges must be an array of strings");
  }
  json vocab = json::object(), added = json::array();
  for (size_t id = 0; id < tokens->pieces->size(); ++id) {
    const std::string& piece = (*tokens->pieces)[id];
    const int type = tokens->types[id];
    if (type == M::kControl || type == M::kUserDefined) {
      added.push_back({{"id", id}, {"content", piece}, {"special", type == M::kControl}});
    } else {
      vocab[piece] = id;
    }
  }
  json j = {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"},
                 {"pattern", {{"Regex", split->regex}}},
                 {"behavior", "Isolated"},
                 {"invert", false}},
                {{"type", "ByteLevel"},
                 {"add_prefix_space", false},
                 {"trim_offsets", true},
                 {"use_regex", false}}}}}},
            {"post_processor", nullptr},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"},
              {"byte_fallback", false},
              {"fuse_unk", false},
              {"ignore_merges", split->ignore_merges},
              {"vocab", vocab},
              {"merges", merges->strings}}}};
  const gguf::Value* add_bos = file.Find("tokenizer.ggml.add_bos_token");
  const gguf::Value* bos = file.Find("tokenizer.ggml.bos_token_id");
  if (add_bos != nullptr && add_bos->integer != 0 && bos != nullptr) {
    if (!bos->is_integer() || bos->integer < 0 ||
        static_cast<size_t>(bos->integer) >= tokens->pieces->size()) {
      return Bad(what, "tokenizer.ggml.bos_token_id is not a token id");
    }
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", (*tokens->pieces)[bos->integer]}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  }
  return j;
}

std::string VocabularyKind(const gguf::File& file) {
  const gguf::Value* model = file.Find("tokenizer.ggml.model");
  return model != nullptr && model->type == gguf::ValueType::kString ? model->string : "";
}

}  // namespace

bool HasGgufVocabulary(const gguf::File& file) {
  const std::string kind = VocabularyKind(file);
  if (kind == "llama") return true;
  const gguf::Value* pre = file.Find("tokenizer.ggml.pre");
  return kind == "gpt2" && pre != nullptr && pre->type == gguf::ValueType::kString &&
         BytePreOf(pre->string).has_value();
}

absl::StatusOr<GgufTokenizerFile> GgufVocabularyFile(const gguf::File& file,
                                                     std::string_view what_view) {
  const std::string what(what_view);
  const std::string kind = VocabularyKind(file);
  if (kind.empty())
    return Bad(what, "tokenizer.ggml.model is missing: the file holds no tokenizer");
  if (kind == "llama") {
    auto m = SentencePieceModelOf(file, what);
    if (!m.ok()) return m.status();
    return GgufTokenizerFile{"tokenizer.model",
                             tokenizer_internal::SerializeSentencePieceModel(*m)};
  }
  if (kind == "gpt2") {
    auto j = ByteLevelJsonOf(file, what);
    if (!j.ok()) return j.status();
    // Strings that are not UTF-8 (a damaged file) become U+FFFD instead of throwing.
    return GgufTokenizerFile{"tokenizer.json",
                             j->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
  }
  return absl::UnimplementedError(absl::StrCat(
      what, ": GGUF vocabulary '", kind,
      "' (kvfold reads \"llama\" SentencePiece and \"gpt2\" byte-level BPE vocabularies; put "
      "the model's tokenizer.json next to the file)"));
}

namespace {

// The tokenizer a vocabulary file gives (the parser of its name).
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerOf(const GgufTokenizerFile& vocabulary,
                                                       const std::string& what) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok;
  if (vocabulary.name == "tokenizer.model") {
    auto sp = SentencePieceTokenizer::Parse(vocabulary.contents);
    if (sp.ok())
      tok = std::unique_ptr<Tokenizer>(std::move(*sp));
    else
      tok = sp.status();
  } else {
    auto hf = HfTokenizer::Parse(vocabulary.contents, "");
    if (hf.ok())
      tok = std::unique_ptr<Tokenizer>(std::move(*hf));
    else
      tok = hf.status();
  }
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(what, ": GGUF vocabulary: ", tok.status().message()));
  }
  return tok;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> GgufTokenizer(const gguf::File& file,
                                                         std::string_view what) {
  auto vocabulary = GgufVocabularyFile(file, what);
  if (!vocabulary.ok()) return vocabulary.status();
  return TokenizerOf(*vocabulary, std::string(what));
}

absl::Status WriteGgufTokenizerFiles(const gguf::File& file, std::string_view what,
                                     const std::string& dir) {
  auto vocabulary = GgufVocabularyFile(file, what);
  if (!vocabulary.ok()) return vocabulary.status();
  // A vocabulary that does not load is not written.
  if (auto tokenizer = TokenizerOf(*vocabulary, std::string(what)); !tokenizer.ok()) {
    return tokenizer.status();
  }
  auto write = [&](const std::string& name, const std::string& text) -> absl::Status {
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
    return absl::OkStatus();
  };
  if (absl::Status s = write(vocabulary->name, vocabulary->contents); !s.ok()) return s;
  const nlohmann::json config = GgufTokenizerConfig(file);
  if (config.empty()) return absl::OkStatus();
  return write("tokenizer_config.json",
               config.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace kvfold
