#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "inference_svc/tokenizer/bpe_merge.h"
#include "inference_svc/tokenizer/unicode_tables.h"

namespace kvfold {
namespace {

using M = tokenizer_internal::SentencePieceModelProto;
constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Parse(
    const std::string& bytes) {
  auto model = tokenizer_internal::ParseSentencePieceModel(bytes);
  if (!model.ok()) return model.status();
  return FromModel(*std::move(model));
}

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromModel(
    tokenizer_internal::SentencePieceModelProto model_proto) {
  if (model_proto.pieces.empty())
    return absl::InvalidArgumentError("SentencePiece model: no pieces");
  if (model_proto.model_type != M::kBpe) {
    return absl::UnimplementedError(
        absl::StrCat("SentencePiece model: model_type ", model_proto.model_type,
                     " is not BPE (2); kvfold implements the BPE models of the Llama family"));
  }
  if (!model_proto.precompiled_charsmap.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "SentencePiece model: normalization rule '", model_proto.normalizer_name,
        "' needs a precompiled charsmap, which kvfold does not implement (identity only)"));
  }
  auto tok = std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
  tok->model_ = std::move(model_proto);
  const M& m = tok->model_;
  const int32_t n = static_cast<int32_t>(m.pieces.size());
  std::fill(std::begin(tok->byte_ids_), std::end(tok->byte_ids_), -1);
  tok->token_bytes_.resize(n);
  tok->dummy_space_.assign(n, false);
  const std::string_view space = m.escape_whitespaces ? kSpaceSymbol : " ";
  for (int32_t id = 0; id < n; ++id) {
    const M::Piece& p = m.pieces[id];
    if (p.piece.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("SentencePiece model: piece ", id, " is empty"));
    }
    tok->all_pieces_.try_emplace(p.piece, id);
    std::string& out = tok->token_bytes_[id];
    switch (p.type) {
      case M::kNormal:
      case M::kUserDefined:
      case M::kUnused:
        tok->mergeable_.try_emplace(p.piece, id);
        if (p.type == M::kUserDefined) tok->user_defined_.push_back(p.piece);
        out = tokenizer_internal::ReplaceAll(p.piece, kSpaceSymbol, " ");
        tok->dummy_space_[id] = p.type == M::kNormal && m.add_dummy_prefix &&
                                !m.treat_whitespace_as_suffix && p.piece.starts_with(space);
        break;
      case M::kUnknown:
        if (tok->unk_id_ < 0) tok->unk_id_ = id;
        out = m.unk_surface;
        break;
      case M::kControl:
        out = p.piece;
        if (p.piece == m.bos_piece && tok->bos_id_ < 0) tok->bos_id_ = id;
        if (p.piece == m.eos_piece && tok->eos_id_ < 0) tok->eos_id_ = id;
        break;
      case M::kByte: {
        unsigned value;
        char close = 0;
        if (p.piece.size() != 6 || std::sscanf(p.piece.c_str(), "<0x%2X%c", &value, &close) != 2 ||
            close != '>') {
          return absl::InvalidArgumentError(
              absl::StrCat("SentencePiece model: byte piece ", id, " is '", p.piece, "'"));
        }
        tok->byte_ids_[value] = id;
        out = std::string(1, static_cast<char>(value));
        break;
      }
    }
  }
  if (tok->unk_id_ < 0) {
    return absl::InvalidArgumentError("SentencePiece model: no UNKNOWN piece");
  }
  std::sort(tok->user_defined_.begin(), tok->user_defined_.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return tok;
}

// libsentencepiece's Normalizer::Normalize with an empty charsmap (the identity rule).
std::string SentencePieceTokenizer::Normalize(std::string_view text) const {
  const M& m = model_;
  const std::string_view ws = m.escape_whitespaces ? kSpaceSymbol : " ";
  std::string out;
  out.reserve(text.size() + text.size() / 2 + 3);
  size_t i = 0;
  if (m.remove_extra_whitespaces) {
    while (i < text.size() && text[i] == ' ') ++i;  // heading spaces
  }
  if (i == text.size()) return out;
  if (!m.treat_whitespace_as_suffix && m.add_dummy_prefix) out.append(ws);
  bool prev_space = m.remove_extra_whitespaces;
  while (i < text.size()) {
    uint32_t cp;
    size_t len = tokenizer_internal::DecodeUtf8(text, i, &cp);
    const bool invalid = cp == 0xFFFD && text.compare(i, len, kReplacementChar) != 0;
    if (text[i] == ' ') {
      if (!prev_space) out.append(ws);
      prev_space = m.remove_extra_whitespaces;
    } else {
      out.append(invalid ? kReplacementChar : text.substr(i, len));
      prev_space = false;
    }
    i += len;
  }
  if (m.remove_extra_whitespaces) {
    while (out.size() >= ws.size() && out.compare(out.size() - ws.size(), ws.size(), ws) == 0) {
      out.resize(out.size() - ws.size());
    }
  }
  if (m.treat_whitespace_as_suffix && m.add_dummy_prefix) out.append(ws);
  return out;
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text,
                                                                    bool add_bos) const {
  const std::string norm = Normalize(text);
  // Symbols are spans of `norm`; merged spans remember their halves for resegmentation.
  struct Span {
    uint32_t begin;
    uint32_t len;
    int32_t left;
    int32_t right;
    bool frozen;  // user-defined symbols never merge
  };
  std::vector<Span> spans;
  std::vector<int32_t> symbols;
  spans.reserve(norm.size() * 2);
  for (size_t pos = 0; pos < norm.size();) {
    size_t len = 0;
    bool frozen = false;
    for (const auto& u : user_defined_) {
      if (norm.compare(pos, u.size(), u) == 0) {
        len = u.size();
        frozen = true;
        break;
      }
    }
    if (len == 0) {
      uint32_t cp;
      len = tokenizer_internal::DecodeUtf8(norm, pos, &cp);
    }
    symbols.push_back(static_cast<int32_t>(spans.size()));
    spans.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), -1, -1, frozen});
    pos += len;
  }
  auto text_of = [&](const Span& s) { return std::string_view(norm).substr(s.begin, s.len); };
  tokenizer_internal::GreedyMerge<float>(
      &symbols, [&](int32_t a, int32_t b, float* key, int32_t* merged) {
        const Span sa = spans[a], sb = spans[b];
        if (sa.frozen || sb.frozen) return false;
        auto it = mergeable_.find(std::string_view(norm).substr(sa.begin, sa.len + sb.len));
        if (it == mergeable_.end()) return false;
        *key = -model_.pieces[it->second].score;
        *merged = static_cast<int32_t>(spans.size());
        spans.push_back({sa.begin, sa.len + sb.len, a, b, false});
        return true;
      });
  std::vector<int32_t> ids;
  ids.reserve(symbols.size() + 1);
  if (add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  bool prev_unk = false;
  // Unused pieces are split back into the pieces they were merged from.
  std::vector<int32_t> stack;
  for (int32_t s : symbols) {
    stack.push_back(s);
    while (!stack.empty()) {
      const Span span = spans[stack.back()];
      stack.pop_back();
      auto it = all_pieces_.find(text_of(span));
      int32_t id = it == all_pieces_.end() ? unk_id_ : it->second;
      if (model_.pieces[id].type == M::kUnused && span.left >= 0) {
        stack.push_back(span.right);
        stack.push_back(span.left);
        continue;
      }
      if (model_.pieces[id].type == M::kUnknown && model_.byte_fallback) {
        for (char c : text_of(span)) {
          const int32_t b = byte_ids_[static_cast<unsigned char>(c)];
          ids.push_back(b >= 0 ? b : unk_id_);
        }
        prev_unk = false;
        continue;
      }
      const bool is_unk = model_.pieces[id].type == M::kUnknown;
      if (!(is_unk && prev_unk)) ids.push_back(id);  // runs of unknowns fuse into one
      prev_unk = is_unk;
    }
  }
  return ids;
}

std::string_view SentencePieceTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_bytes_[id];
}

bool SentencePieceTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && model_.pieces[id].type == M::kControl;
}

bool SentencePieceTokenizer::StartsWithDummySpace(int32_t id) const {
  return id >= 0 && id < vocab_size() && dummy_space_[id];
}

}  // namespace kvfold
