#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "inference_svc/tokenizer/string_map.h"

namespace kvfold {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Parse(
    const std::string& bytes) {
  auto tok = std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
  std::string error;
  tok->backend_ = tokenizer_internal::SentencePieceBackend::Load(bytes, &error);
  if (tok->backend_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece model: libsentencepiece rejected it: ", error));
  }
  const auto& sp = *tok->backend_;
  const int32_t n = sp.piece_size();
  if (n <= 0) return absl::InvalidArgumentError("SentencePiece model: empty vocabulary");
  tok->bos_id_ = sp.bos_id() >= 0 && sp.bos_id() < n ? sp.bos_id() : -1;
  tok->eos_id_ = sp.eos_id() >= 0 && sp.eos_id() < n ? sp.eos_id() : -1;
  // Whether the normalizer adds a dummy prefix: "a" then encodes to a piece with U+2581.
  std::vector<int> probe;
  bool dummy_prefix = sp.Encode("a", &probe, &error) && !probe.empty() &&
                      sp.IdToPiece(probe[0]).starts_with(kSpaceSymbol);
  const std::string unk_surface = sp.DecodeIds({sp.unk_id()});
  tok->pieces_.resize(n);
  tok->scores_.resize(n);
  tok->token_bytes_.resize(n);
  tok->is_byte_.assign(n, false);
  tok->is_special_.assign(n, false);
  tok->dummy_space_.assign(n, false);
  for (int32_t id = 0; id < n; ++id) {
    const std::string piece = sp.IdToPiece(id);
    tok->pieces_[id] = piece;
    tok->scores_[id] = sp.GetScore(id);
    if (sp.IsByte(id)) {
      if (piece.size() != 6 || HexDigit(piece[3]) < 0 || HexDigit(piece[4]) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("SentencePiece model: byte piece ", id, " is '", piece, "'"));
      }
      tok->is_byte_[id] = true;
      tok->token_bytes_[id] = std::string(1, static_cast<char>(HexDigit(piece[3]) * 16 +
                                                               HexDigit(piece[4])));
    } else if (sp.IsControl(id)) {
      tok->is_special_[id] = true;
      tok->token_bytes_[id] = piece;
    } else if (sp.IsUnknown(id)) {
      tok->token_bytes_[id] = unk_surface;
    } else {
      tok->token_bytes_[id] = tokenizer_internal::ReplaceAll(piece, kSpaceSymbol, " ");
      tok->dummy_space_[id] = dummy_prefix && piece.starts_with(kSpaceSymbol);
    }
  }
  return tok;
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text,
                                                                    bool add_bos) const {
  std::vector<int> raw;
  std::string error;
  if (!backend_->Encode(text, &raw, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece encode failed: ", error));
  }
  std::vector<int32_t> ids;
  ids.reserve(raw.size() + 1);
  if (add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  ids.insert(ids.end(), raw.begin(), raw.end());
  return ids;
}

std::string_view SentencePieceTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_bytes_[id];
}

bool SentencePieceTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && is_special_[id];
}

bool SentencePieceTokenizer::StartsWithDummySpace(int32_t id) const {
  return id >= 0 && id < vocab_size() && dummy_space_[id];
}

std::string SentencePieceTokenizer::DecodeWithLibrary(std::span<const int32_t> ids) const {
  return backend_->DecodeIds(std::vector<int>(ids.begin(), ids.end()));
}

}  // namespace kvfold
