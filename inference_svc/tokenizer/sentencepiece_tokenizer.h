// SentencePiece .model files through Debian's libsentencepiece (encode is exactly
// libsentencepiece's; decode follows the Tokenizer contract, which matches
// SentencePieceProcessor::DecodeIds on the vocabularies tested in
// tests/inference_svc/tokenizer).
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "inference_svc/tokenizer/sentencepiece_backend.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Parses a serialized ModelProto; InvalidArgument with libsentencepiece's message
  // when it is not one.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Parse(
      const std::string& bytes);

  // libsentencepiece's Encode (its normalizer, dummy prefix and byte fallback), with
  // bos_id() prepended when add_bos and the model has a BOS piece.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_bos) const override;
  std::string_view TokenBytes(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  bool StartsWithDummySpace(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }

  // The piece as the model stores it (with U+2581), its score, and whether it is a
  // byte-fallback piece. Used to derive equivalent vocabularies in tests.
  const std::string& piece(int32_t id) const { return pieces_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  bool IsByte(int32_t id) const { return is_byte_[id]; }
  // libsentencepiece's own DecodeIds, for cross-checks.
  std::string DecodeWithLibrary(std::span<const int32_t> ids) const;

 private:
  SentencePieceTokenizer() = default;

  std::unique_ptr<tokenizer_internal::SentencePieceBackend> backend_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<std::string> token_bytes_;
  std::vector<bool> is_byte_;
  std::vector<bool> is_special_;
  std::vector<bool> dummy_space_;
};

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
