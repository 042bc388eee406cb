// SentencePiece .model files, read and encoded natively: the ModelProto is parsed from
// the wire format and BPE encoding re-implements libsentencepiece 0.1.97 (normalizer
// with the identity rule, dummy prefix, whitespace escaping and removal, user-defined
// symbols, best-score-first merges, unused-piece resegmentation, byte fallback, fusion of
// consecutive unknowns). Debian's libsentencepiece cannot be linked into kvfold's
// binaries (its bundled protobuf 3.14 clashes with the system protobuf that gRPC uses),
// so it serves as the test oracle instead: tests/inference_svc/tokenizer compares the two
// on real text.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "inference_svc/tokenizer/sentencepiece_model.h"
#include "inference_svc/tokenizer/string_map.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Parses a serialized ModelProto. InvalidArgument when it is not one; Unimplemented
  // for Unigram/word/char models and for normalizers with a precompiled charsmap (e.g.
  // nmt_nfkc): kvfold implements the BPE + identity normalization of the Llama family.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Parse(
      const std::string& bytes);
  // The same from a model already read (a ModelProto's fields, or a GGUF file's llama
  // vocabulary: gguf_vocab.h).
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromModel(
      tokenizer_internal::SentencePieceModelProto model);

  // libsentencepiece's Encode, with bos_id() prepended when add_bos and the model has a
  // BOS piece. Never fails on any byte string (invalid UTF-8 becomes U+FFFD first, as in
  // libsentencepiece).
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_bos) const override;
  std::string_view TokenBytes(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  bool StartsWithDummySpace(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }

  // The model's fields as read (SerializeSentencePieceModel writes them as a .model file).
  const tokenizer_internal::SentencePieceModelProto& model() const { return model_; }
  // The piece as the model stores it (with U+2581), its score, and whether it is a
  // byte-fallback piece. Used to derive equivalent vocabularies in tests.
  const std::string& piece(int32_t id) const { return model_.pieces[id].piece; }
  float score(int32_t id) const { return model_.pieces[id].score; }
  bool IsByte(int32_t id) const {
    return model_.pieces[id].type == tokenizer_internal::SentencePieceModelProto::kByte;
  }

 private:
  SentencePieceTokenizer() = default;
  std::string Normalize(std::string_view text) const;

  tokenizer_internal::SentencePieceModelProto model_;
  tokenizer_internal::StringMap<int32_t> mergeable_;  // NORMAL, USER_DEFINED, UNUSED
  tokenizer_internal::StringMap<int32_t> all_pieces_;
  std::vector<std::string> user_defined_;  // longest first
  int32_t unk_id_ = -1;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t byte_ids_[256];
  std::vector<std::string> token_bytes_;
  std::vector<bool> dummy_space_;
};

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
