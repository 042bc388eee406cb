#include "inference_svc/tokenizer/gguf_vocab.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvfold {
namespace {

using M = tokenizer_internal::SentencePieceModelProto;

}  // namespace

bool HasGgufVocabulary(const gguf::File& file) {
  const gguf::Value* model = file.Find("tokenizer.ggml.model");
  return model != nullptr && model->type == gguf::ValueType::kString && model->string == "llama";
}

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

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> GgufTokenizer(const gguf::File& file,
                                                                      std::string_view what_view) {
  const std::string what(what_view);
  auto bad = [&](const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": GGUF vocabulary: ", message));
  };
  const gguf::Value* model = file.Find("tokenizer.ggml.model");
  if (model == nullptr || model->type != gguf::ValueType::kString) {
    return bad("tokenizer.ggml.model is missing: the file holds no tokenizer");
  }
  if (model->string != "llama") {
    return absl::UnimplementedError(absl::StrCat(
        what, ": GGUF vocabulary '", model->string,
        "' (kvfold reads \"llama\" SentencePiece vocabularies; put the model's tokenizer.json "
        "next to the file)"));
  }
  const gguf::Value* tokens = file.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type != gguf::ValueType::kArray ||
      tokens->element_type != gguf::ValueType::kString || tokens->strings.empty()) {
    return bad("tokenizer.ggml.tokens must be a non-empty array of strings");
  }
  const size_t n = tokens->strings.size();
  auto numbers = [&](const char* key) -> absl::StatusOr<const std::vector<double>*> {
    const gguf::Value* v = file.Find(key);
    if (v == nullptr) return nullptr;
    if (v->type != gguf::ValueType::kArray || v->numbers.size() != n) {
      return bad(absl::StrCat(key, " must be an array of ", n, " numbers (one per token)"));
    }
    return &v->numbers;
  };
  auto scores = numbers("tokenizer.ggml.scores");
  if (!scores.ok()) return scores.status();
  auto types = numbers("tokenizer.ggml.token_type");
  if (!types.ok()) return types.status();
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
    p.piece = tokens->strings[id];
    p.score = *scores == nullptr ? 0.0f : static_cast<float>((**scores)[id]);
    // GGUF token types are SentencePiece's (0 = undefined is read as normal).
    const double type = *types == nullptr ? 1 : (**types)[id];
    if (!(type >= 0 && type <= static_cast<double>(M::kByte)) || type != static_cast<int>(type)) {
      return bad(absl::StrCat("token ", id, " has type ", type, " (0..6)"));
    }
    p.type = type == 0 ? M::kNormal : static_cast<M::PieceType>(static_cast<int>(type));
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
      return bad(absl::StrCat(key, " is not a token id in [0, ", n, ")"));
    }
    *piece = tokens->strings[v->integer];
  }
  auto tok = SentencePieceTokenizer::FromModel(std::move(m));
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(what, ": GGUF vocabulary: ", tok.status().message()));
  }
  return tok;
}

absl::Status WriteGgufTokenizerFiles(const gguf::File& file, std::string_view what,
                                     const std::string& dir) {
  auto tokenizer = GgufTokenizer(file, what);
  if (!tokenizer.ok()) return tokenizer.status();
  auto write = [&](const char* name, const std::string& text) -> absl::Status {
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
    return absl::OkStatus();
  };
  if (absl::Status s = write("tokenizer.model", tokenizer_internal::SerializeSentencePieceModel(
                                                    (*tokenizer)->model()));
      !s.ok()) {
    return s;
  }
  const nlohmann::json config = GgufTokenizerConfig(file);
  if (config.empty()) return absl::OkStatus();
  return write("tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace kvfold
