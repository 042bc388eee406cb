// Debian's libsentencepiece as a TEST ORACLE for kvfold's own SentencePiece reader.
// It cannot be linked into kvfold's binaries: libsentencepiece.so.0 exports its own
// bundled copy of protobuf 3.14 (745 google::protobuf symbols), which interposes with the
// system libprotobuf 3.21 that gRPC uses ("compiled against version 3.14.0 of the
// Protocol Buffer runtime" abort on the first model load). Test binaries that do not link
// protobuf can use it. Its header also declares `namespace absl { using
// std::string_view; }`, which collides with Debian's Abseil, so only
// sentencepiece_reference.cc includes it and this header is standard-library only.
#ifndef KVFOLD_TESTS_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_REFERENCE_H_
#define KVFOLD_TESTS_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_REFERENCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvfold::testing {

class SentencePieceReference {
 public:
  ~SentencePieceReference();

  // Parses a serialized ModelProto. Returns null and sets *error on failure.
  static std::unique_ptr<SentencePieceReference> Load(const std::string& serialized,
                                                    std::string* error);

  // Loads a .model file; null when missing or invalid.
  static std::unique_ptr<SentencePieceReference> LoadFile(const std::string& path);
  // Encode with BOS (id 1 for the models tested) prepended when add_bos; aborts the
  // test process on an encode error (the reference never fails on these models).
  std::vector<int32_t> EncodeIds(std::string_view text, bool add_bos) const;

  // Returns false and sets *error on failure.
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  std::string DecodeIds(const std::vector<int>& ids) const;

  int piece_size() const;
  std::string IdToPiece(int id) const;
  float GetScore(int id) const;
  bool IsByte(int id) const;
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  bool IsUnused(int id) const;
  int bos_id() const;
  int eos_id() const;
  int unk_id() const;

 private:
  SentencePieceReference();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_REFERENCE_H_
