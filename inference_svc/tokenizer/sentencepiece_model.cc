#include "inference_svc/tokenizer/sentencepiece_model.h"

#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace kvfold::tokenizer_internal {
namespace {

// Protobuf wire format: varint keys (field << 3 | wire type), types 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32.
class WireReader {
 public:
  WireReader(std::string_view data, size_t base) : data_(data), base_(base) {}

  bool done() const { return pos_ >= data_.size(); }
  size_t offset() const { return base_ + pos_; }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

  // Reads one field; *payload is set for length-delimited fields, *value otherwise
  // (fixed32 in the low bits).
  bool Field(uint32_t* field, int* wire, uint64_t* value, std::string_view* payload,
             size_t* payload_offset) {
    uint64_t key;
    if (!Varint(&key)) return false;
    *field = static_cast<uint32_t>(key >> 3);
    *wire = static_cast<int>(key & 7);
    switch (*wire) {
      case 0:
        return Varint(value);
      case 1:
        if (data_.size() - pos_ < 8) return false;
        std::memcpy(value, data_.data() + pos_, 8);
        pos_ += 8;
        return true;
      case 2: {
        uint64_t len;
        if (!Varint(&len) || len > data_.size() - pos_) return false;
        *payload = data_.substr(pos_, len);
        *payload_offset = base_ + pos_;
        pos_ += len;
        return true;
      }
      case 5: {
        if (data_.size() - pos_ < 4) return false;
        uint32_t v;
        std::memcpy(&v, data_.data() + pos_, 4);
        *value = v;
        pos_ += 4;
        return true;
      }
      default:
        return false;  // groups (3, 4) are not used by ModelProto
    }
  }

 private:
  std::string_view data_;
  size_t base_;
  size_t pos_ = 0;
};

absl::Status Malformed(const char* what, size_t offset) {
  return absl::InvalidArgumentError(
      absl::StrCat("SentencePiece model: malformed ", what, " at byte ", offset));
}

float AsFloat(uint64_t bits) {
  const uint32_t b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Calls on_field(field, wire, value, payload, payload_offset) for every field of a
// message; false on a wire error.
template <typename Fn>
absl::Status ForEachField(std::string_view data, size_t base, const char* what, Fn&& on_field) {
  WireReader r(data, base);
  while (!r.done()) {
    uint32_t field;
    int wire;
    uint64_t value = 0;
    std::string_view payload;
    size_t payload_offset = 0;
    const size_t at = r.offset();
    if (!r.Field(&field, &wire, &value, &payload, &payload_offset)) return Malformed(what, at);
    if (auto s = on_field(field, wire, value, payload, payload_offset); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SentencePieceModelProto> ParseSentencePieceModel(const std::string& bytes) {
  using M = SentencePieceModelProto;
  M model;
  auto status = ForEachField(
      bytes, 0, "ModelProto",
      [&](uint32_t field, int wire, uint64_t value, std::string_view payload,
          size_t off) -> absl::Status {
        if (field == 1 && wire == 2) {  // pieces
          M::Piece piece;
          uint64_t type = M::kNormal;
          auto s = ForEachField(payload, off, "SentencePiece",
                                [&](uint32_t f, int w, uint64_t v, std::string_view p,
                                    size_t) -> absl::Status {
                                  if (f == 1 && w == 2) piece.piece = std::string(p);
                                  if (f == 2 && w == 5) piece.score = AsFloat(v);
                                  if (f == 3 && w == 0) type = v;
                                  return absl::OkStatus();
                                });
          if (!s.ok()) return s;
          if (type < M::kNormal || type > M::kByte) return Malformed("piece type", off);
          piece.type = static_cast<M::PieceType>(type);
          model.pieces.push_back(std::move(piece));
        } else if (field == 2 && wire == 2) {  // trainer_spec
          return ForEachField(payload, off, "TrainerSpec",
                              [&](uint32_t f, int w, uint64_t v, std::string_view p,
                                  size_t) -> absl::Status {
                                if (f == 3 && w == 0) model.model_type = static_cast<int>(v);
                                if (f == 24 && w == 0) model.treat_whitespace_as_suffix = v != 0;
                                if (f == 35 && w == 0) model.byte_fallback = v != 0;
                                if (f == 44 && w == 2) model.unk_surface = std::string(p);
                                if (f == 46 && w == 2) model.bos_piece = std::string(p);
                                if (f == 47 && w == 2) model.eos_piece = std::string(p);
                                return absl::OkStatus();
                              });
        } else if (field == 3 && wire == 2) {  // normalizer_spec
          return ForEachField(payload, off, "NormalizerSpec",
                              [&](uint32_t f, int w, uint64_t v, std::string_view p,
                                  size_t) -> absl::Status {
                                if (f == 1 && w == 2) model.normalizer_name = std::string(p);
                                if (f == 2 && w == 2) model.precompiled_charsmap = std::string(p);
                                if (f == 3 && w == 0) model.add_dummy_prefix = v != 0;
                                if (f == 4 && w == 0) model.remove_extra_whitespaces = v != 0;
                                if (f == 5 && w == 0) model.escape_whitespaces = v != 0;
                                return absl::OkStatus();
                              });
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  if (model.pieces.empty()) {
    return absl::InvalidArgumentError("SentencePiece model: no pieces (not a .model file?)");
  }
  return model;
}

namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutVarintField(std::string* out, uint32_t field, uint64_t v) {
  PutVarint(out, uint64_t{field} << 3);
  PutVarint(out, v);
}

void PutBytesField(std::string* out, uint32_t field, std::string_view bytes) {
  PutVarint(out, (uint64_t{field} << 3) | 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

void PutFloatField(std::string* out, uint32_t field, float v) {
  PutVarint(out, (uint64_t{field} << 3) | 5);
  char bytes[4];
  std::memcpy(bytes, &v, 4);
  out->append(bytes, 4);
}

}  // namespace

std::string SerializeSentencePieceModel(const SentencePieceModelProto& model) {
  std::string out;
  for (const SentencePieceModelProto::Piece& p : model.pieces) {
    std::string piece;
    PutBytesField(&piece, 1, p.piece);
    PutFloatField(&piece, 2, p.score);
    PutVarintField(&piece, 3, p.type);
    PutBytesField(&out, 1, piece);
  }
  std::string trainer;
  PutVarintField(&trainer, 3, model.model_type);
  PutVarintField(&trainer, 24, model.treat_whitespace_as_suffix);
  PutVarintField(&trainer, 35, model.byte_fallback);
  PutBytesField(&trainer, 44, model.unk_surface);
  PutBytesField(&trainer, 46, model.bos_piece);
  PutBytesField(&trainer, 47, model.eos_piece);
  PutBytesField(&out, 2, trainer);
  std::string normalizer;
  PutBytesField(&normalizer, 1, model.normalizer_name);
  if (!model.precompiled_charsmap.empty())
    PutBytesField(&normalizer, 2, model.precompiled_charsmap);
  PutVarintField(&normalizer, 3, model.add_dummy_prefix);
  PutVarintField(&normalizer, 4, model.remove_extra_whitespaces);
  PutVarintField(&normalizer, 5, model.escape_whitespaces);
  PutBytesField(&out, 3, normalizer);
  return out;
}

}  // namespace kvfold::tokenizer_internal
