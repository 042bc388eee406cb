// Hugging Face tokenizer.json with a BPE model: byte-level BPE (GPT-2, Llama-3, Qwen2)
// and SentencePiece-style BPE with byte fallback (Llama-2, Mistral). See
// docs/tokenizers.md for the supported normalizers / pre-tokenizers and approximations.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_HF_TOKENIZER_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_HF_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold {

class HfTokenizer : public Tokenizer {
 public:
  // Parses tokenizer.json text. `dir` (may be empty) is searched for
  // tokenizer_config.json, whose bos_token / eos_token override the defaults.
  // InvalidArgument for bad JSON or an inconsistent vocabulary (the message names the
  // JSON path), Unimplemented for models/normalizers/pre-tokenizers kvfold lacks.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Parse(const std::string& json,
                                                            const std::string& dir);

  ~HfTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_bos) const override;
  std::string_view TokenBytes(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  bool StartsWithDummySpace(int32_t id) const override;
  int32_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;

  // Human-readable notes on where this file's pipeline is approximated (e.g. "NFC
  // normalization is not applied"); empty when encode is exact.
  const std::vector<std::string>& approximations() const;

  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_HF_TOKENIZER_H_
