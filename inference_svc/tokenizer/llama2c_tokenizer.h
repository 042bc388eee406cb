// llama2.c's tokenizer.bin: encode and decode exactly as llama2.c run.c does.
//
// File format (little-endian): int32 max_token_length, then for each token id in order
// float32 score, int32 len, len bytes of piece (no terminator). The vocabulary size is
// not stored: it is the number of entries up to end of file. Pieces use ' ' where
// SentencePiece has U+2581; BOS/EOS are ids 1 and 2 (pieces "\n<s>\n", "\n</s>\n");
// ids 3..258 are the byte pieces "<0x00>".."<0xFF>".
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_LLAMA2C_TOKENIZER_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_LLAMA2C_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "inference_svc/tokenizer/string_map.h"
#include "inference_svc/tokenizer/tokenizer.h"

namespace kvfold {

class Llama2cTokenizer : public Tokenizer {
 public:
  // Parses a tokenizer.bin image. InvalidArgument (with the entry index and byte offset)
  // for a truncated entry, a negative or oversized length, or an empty vocabulary.
  // A file cut exactly at an entry boundary is indistinguishable from a smaller
  // vocabulary: callers compare vocab_size() with the model's vocab_size.
  static absl::StatusOr<std::unique_ptr<Llama2cTokenizer>> Parse(const std::string& bytes);

  // run.c encode(): [BOS=1 if add_bos] + [id of " " if text is non-empty] + one token per
  // UTF-8 codepoint (unknown codepoints become their bytes, id = byte + 3), then merge
  // the adjacent pair whose concatenated piece has the highest score (first on ties,
  // only scores > -1e10) until no pair merges. BOS takes part in merging, as in run.c.
  // Differences from run.c, which only matter for malformed input: text is processed
  // to its full length (run.c stops at a NUL byte); a vocabulary without " " gets the
  // byte-fallback token for ' '; duplicate pieces resolve to the lowest id.
  // InvalidArgument when byte fallback is needed but the vocabulary has < 259 entries.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_bos) const override;

  std::string_view TokenBytes(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  bool StartsWithDummySpace(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return vocab_size() > 1 ? 1 : -1; }
  int32_t eos_id() const override { return vocab_size() > 2 ? 2 : -1; }

  // The piece as stored in the file, and its score.
  const std::string& piece(int32_t id) const { return pieces_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  int32_t max_token_length() const { return max_token_length_; }

 private:
  Llama2cTokenizer() = default;

  int32_t max_token_length_ = 0;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<std::string> token_bytes_;   // decoded bytes per id
  std::vector<bool> dummy_space_;          // normal piece starting with ' '
  tokenizer_internal::StringMap<int32_t> piece_to_id_;
};

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_LLAMA2C_TOKENIZER_H_
