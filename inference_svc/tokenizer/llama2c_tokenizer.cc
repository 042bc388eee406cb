#include "inference_svc/tokenizer/llama2c_tokenizer.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "inference_svc/tokenizer/bpe_merge.h"

namespace kvfold {
namespace {

// run.c hard-codes these.
constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kByteOffset = 3;
constexpr int32_t kMaxTokenLengthLimit = 1 << 20;
// run.c: `float best_score = -1e10;` and only strictly better scores merge.
constexpr float kMinMergeScore = -1e10f;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xAB>" -> 0xAB (one or two hex digits, either case), otherwise -1.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() < 5 || piece.size() > 6 || piece.substr(0, 3) != "<0x" ||
      piece.back() != '>') {
    return -1;
  }
  int value = 0;
  for (char c : piece.substr(3, piece.size() - 4)) {
    const int h = HexValue(c);
    if (h < 0) return -1;
    value = value * 16 + h;
  }
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Llama2cTokenizer>> Llama2cTokenizer::Parse(
    const std::string& bytes) {
  auto tok = std::unique_ptr<Llama2cTokenizer>(new Llama2cTokenizer());
  size_t offset = 0;
  auto read_i32 = [&](int32_t* v) {
    if (bytes.size() - offset < 4) return false;
    std::memcpy(v, bytes.data() + offset, 4);
    offset += 4;
    return true;
  };
  if (!read_i32(&tok->max_token_length_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c tokenizer: file of ", bytes.size(), " bytes is too short for the header"));
  }
  if (tok->max_token_length_ <= 0 || tok->max_token_length_ > kMaxTokenLengthLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c tokenizer: max_token_length ", tok->max_token_length_,
        " is not in [1, ", kMaxTokenLengthLimit, "]; not a llama2.c tokenizer.bin?"));
  }
  while (offset < bytes.size()) {
    const size_t entry_offset = offset;
    const int32_t id = static_cast<int32_t>(tok->pieces_.size());
    float score;
    int32_t len;
    if (bytes.size() - offset < 8) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama2.c tokenizer: truncated at entry ", id, " (offset ", entry_offset, " of ",
          bytes.size(), " bytes): need 8 header bytes"));
    }
    std::memcpy(&score, bytes.data() + offset, 4);
    std::memcpy(&len, bytes.data() + offset + 4, 4);
    offset += 8;
    if (len < 0 || len > tok->max_token_length_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama2.c tokenizer: entry ", id, " (offset ", entry_offset, ") has length ", len,
          ", outside [0, max_token_length=", tok->max_token_length_, "]"));
    }
    if (bytes.size() - offset < static_cast<size_t>(len)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "llama2.c tokenizer: truncated at entry ", id, " (offset ", entry_offset,
          "): piece of ", len, " bytes but only ", bytes.size() - offset, " left"));
    }
    tok->pieces_.emplace_back(bytes.data() + offset, len);
    tok->scores_.push_back(score);
    offset += len;
  }
  if (tok->pieces_.empty()) {
    return absl::InvalidArgumentError("llama2.c tokenizer: no entries after the header");
  }
  const int32_t n = tok->vocab_size();
  tok->token_bytes_.resize(n);
  tok->dummy_space_.assign(n, false);
  tok->piece_to_id_.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& piece = tok->pieces_[id];
    tok->piece_to_id_.try_emplace(piece, id);  // first (lowest) id wins on duplicates
    const int byte = ParseBytePiece(piece);
    if (byte >= 0) {
      tok->token_bytes_[id] = std::string(1, static_cast<char>(byte));
    } else {
      tok->token_bytes_[id] = piece;
      tok->dummy_space_[id] = !tok->IsSpecial(id) && !piece.empty() && piece[0] == ' ';
    }
  }
  return tok;
}

absl::StatusOr<std::vector<int32_t>> Llama2cTokenizer::Encode(std::string_view text,
                                                              bool add_bos) const {
  const int32_t n = vocab_size();
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 2);
  bool fallback_ok = n >= kByteOffset + 256;
  auto byte_fallback = [&](unsigned char b) {
    if (!fallback_ok) return false;
    ids.push_back(static_cast<int32_t>(b) + kByteOffset);
    return true;
  };
  auto unrepresentable = [&](size_t pos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "llama2.c tokenizer: byte ", pos, " of the text has no token and the vocabulary (",
        n, " pieces) has no byte fallback"));
  };
  if (add_bos && n > kBosId) ids.push_back(kBosId);
  if (!text.empty()) {
    auto it = piece_to_id_.find(std::string_view(" "));
    if (it != piece_to_id_.end()) {
      ids.push_back(it->second);
    } else if (!byte_fallback(' ')) {
      return unrepresentable(0);
    }
  }
  // One token per UTF-8 codepoint, exactly run.c's loop (at most 4 bytes per lookup).
  char buf[4];
  size_t len = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) len = 0;
    buf[len++] = static_cast<char>(c);
    const unsigned char next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if ((next & 0xC0) == 0x80 && len < 4) continue;
    auto it = piece_to_id_.find(std::string_view(buf, len));
    if (it != piece_to_id_.end()) {
      ids.push_back(it->second);
    } else {
      for (size_t k = 0; k < len; ++k) {
        if (!byte_fallback(static_cast<unsigned char>(buf[k]))) return unrepresentable(i);
      }
    }
    len = 0;
  }
  std::string scratch;
  scratch.reserve(2 * static_cast<size_t>(max_token_length_) + 2);
  tokenizer_internal::GreedyMerge<float>(
      &ids, [&](int32_t a, int32_t b, float* key, int32_t* merged) {
        scratch.assign(pieces_[a]);
        scratch.append(pieces_[b]);
        auto it = piece_to_id_.find(scratch);
        if (it == piece_to_id_.end()) return false;
        const float score = scores_[it->second];
        if (!(score > kMinMergeScore)) return false;  // also rejects NaN
        *key = -score;  // exact: the heap pops the smallest key
        *merged = it->second;
        return true;
      });
  return ids;
}

std::string_view Llama2cTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return token_bytes_[id];
}

bool Llama2cTokenizer::IsSpecial(int32_t id) const {
  return (id == kBosId || id == kEosId) && id < vocab_size();
}

bool Llama2cTokenizer::StartsWithDummySpace(int32_t id) const {
  return id >= 0 && id < vocab_size() && dummy_space_[id];
}

}  // namespace kvfold
