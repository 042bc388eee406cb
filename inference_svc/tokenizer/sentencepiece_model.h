// A reader for SentencePiece's ModelProto (.model files) that needs no protobuf library:
// the fields a tokenizer needs are read straight from the wire format. Field numbers are
// those of sentencepiece_model.proto.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_MODEL_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvfold::tokenizer_internal {

struct SentencePieceModelProto {
  enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
                   kByte = 6 };
  enum ModelType { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };
  struct Piece {
    std::string piece;
    float score = 0.0f;
    PieceType type = kNormal;
  };
  std::vector<Piece> pieces;  // ModelProto.pieces (1)
  // TrainerSpec (2).
  int model_type = kUnigram;              // 3
  bool treat_whitespace_as_suffix = false;  // 24
  bool byte_fallback = false;             // 35
  std::string unk_surface = " \xE2\x81\x87 ";  // 44, default " ⁇ "
  std::string bos_piece = "<s>";          // 46
  std::string eos_piece = "</s>";         // 47
  // NormalizerSpec (3).
  std::string normalizer_name;            // 1
  std::string precompiled_charsmap;       // 2
  bool add_dummy_prefix = true;           // 3
  bool remove_extra_whitespaces = true;   // 4
  bool escape_whitespaces = true;         // 5
};

// InvalidArgument (with the byte offset) for anything that is not a well-formed
// ModelProto with at least one piece.
absl::StatusOr<SentencePieceModelProto> ParseSentencePieceModel(const std::string& bytes);

// The ModelProto bytes of `model` (the fields above; what ParseSentencePieceModel reads
// back, and what libsentencepiece loads): a vocabulary read elsewhere (a GGUF file's)
// written as a .model file.
std::string SerializeSentencePieceModel(const SentencePieceModelProto& model);

}  // namespace kvfold::tokenizer_internal

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_MODEL_H_
