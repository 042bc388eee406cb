// A firewall around Debian's libsentencepiece: its header declares
// `namespace absl { using std::string_view; }`, which collides with Debian's Abseil
// (whose absl::string_view is its own class). Only sentencepiece_backend.cc includes
// sentencepiece_processor.h, and this header uses the standard library alone.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_BACKEND_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_BACKEND_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvfold::tokenizer_internal {

class SentencePieceBackend {
 public:
  ~SentencePieceBackend();

  // Parses a serialized ModelProto. Returns null and sets *error on failure.
  static std::unique_ptr<SentencePieceBackend> Load(const std::string& serialized,
                                                    std::string* error);

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
  SentencePieceBackend();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfold::tokenizer_internal

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_SENTENCEPIECE_BACKEND_H_
