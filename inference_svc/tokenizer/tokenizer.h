// Tokenizers for kvfold: one interface over three file formats.
//
//   llama2.c tokenizer.bin   Llama2cTokenizer   (exactly llama2.c run.c encode/decode)
//   SentencePiece .model     SentencePieceTokenizer (BPE; libsentencepiece's encode,
//                                               re-implemented, tested against it)
//   HF tokenizer.json        HfTokenizer        (byte-level BPE: Llama-3, Qwen2, GPT-2;
//                                               SentencePiece-style BPE: Llama-2, Mistral)
//
// Text is UTF-8 bytes in std::string / std::string_view. Token ids are int32_t.
// Tokenizers are immutable after Load and safe to use from many threads at once.
// See docs/tokenizers.md for the exact semantics and the documented approximations.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_TOKENIZER_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvfold {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads a tokenizer file: a GGUF model's vocabulary (by the file's magic), else the
  // format by extension (.bin llama2.c, .model SentencePiece, .json HF) and, for other
  // names, by content. A directory is resolved with FindNextToModel.
  // Returns NotFound when the path does not exist, InvalidArgument when the file is
  // malformed (truncated, bad JSON, inconsistent vocabulary; the message says what and
  // where), Unimplemented for a valid tokenizer.json using features kvfold does not
  // implement (e.g. a WordPiece model or an unknown pre-tokenizer regex).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);

  // Finds the tokenizer that belongs to a model: `model_path` is a model directory or a
  // model file (then its directory is searched). A GGUF model file whose vocabulary kvfold
  // reads is its own tokenizer; otherwise looks, in this order, for tokenizer.json,
  // tokenizer.model, tokenizer.bin, then tok*.bin (alphabetically first).
  // Returns the file path, or NotFound listing what was looked for.
  static absl::StatusOr<std::string> FindNextToModel(const std::string& model_path);

  // Encodes UTF-8 text. When add_bos is true and the tokenizer has a BOS token, the result
  // starts with bos_id(). Never adds EOS. Any byte string is accepted (invalid UTF-8 goes
  // through byte fallback where the format has it); returns InvalidArgument only when the
  // text cannot be represented at all (a character with no token and no byte fallback).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_bos) const = 0;

  // The bytes token `id` contributes to text in the middle of a sequence: the space
  // symbol U+2581 of SentencePiece-style vocabularies becomes ' ', byte-fallback pieces
  // <0xAB> become the single byte 0xAB, byte-level BPE pieces are mapped back through the
  // GPT-2 byte<->unicode table, special tokens give their literal text. The bytes of one
  // token may be an incomplete UTF-8 sequence. Empty for ids outside [0, vocab_size()).
  virtual std::string_view TokenBytes(int32_t id) const = 0;

  // True for control/special tokens (BOS, EOS, <|...|> added tokens marked special).
  // Decode and IncrementalDecoder skip them.
  virtual bool IsSpecial(int32_t id) const = 0;

  // True when token `id` is a normal piece whose text starts with the dummy-prefix space
  // that Encode inserts (SentencePiece add_dummy_prefix, llama2.c's " " prefix). Decode
  // drops that one space at the start of a text and right after BOS. Always false for
  // tokenizers without a dummy prefix (byte-level BPE) and for byte-fallback pieces.
  virtual bool StartsWithDummySpace(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  // -1 when the tokenizer has no such token.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;

  // Text of a whole sequence: TokenBytes concatenated, special tokens skipped, the
  // dummy-prefix space dropped from the first piece and from the piece after each BOS
  // (llama2.c run.c's rule), invalid UTF-8 replaced by U+FFFD (one per maximal invalid
  // subpart, as Rust's from_utf8_lossy does). Ids outside the vocabulary are skipped.
  // Equals the concatenation of an IncrementalDecoder's Push results plus Flush.
  std::string Decode(std::span<const int32_t> ids) const;
};

// Streaming detokenizer: feed generated ids one at a time, print what comes back.
// Never returns broken UTF-8: an incomplete multi-byte sequence is held back until it
// completes (or turns out invalid, then U+FFFD). Not thread-safe; one per stream.
// Allocation-free in steady state except for the returned strings.
class IncrementalDecoder {
 public:
  // `tokenizer` must outlive the decoder. `at_text_start`: true when the first pushed
  // token starts a text (its dummy-prefix space is dropped, as Decode does); false when
  // continuing after text already shown (e.g. generation after a prompt).
  explicit IncrementalDecoder(const Tokenizer* tokenizer, bool at_text_start = true);

  // Returns the text completed by `id` (possibly empty).
  std::string Push(int32_t id);
  // Returns whatever is held back, incomplete sequences as U+FFFD, and resets the byte
  // buffer (the at-start state is kept).
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool at_start_;
  std::string pending_;  // bytes not yet emitted: an incomplete UTF-8 sequence, < 4 bytes
};

// Appends the valid UTF-8 prefix of `*pending` to `*out`, replacing invalid maximal
// subparts by U+FFFD, and leaves in `*pending` only a trailing incomplete (but so far
// valid) sequence. With `final` true nothing is left: an incomplete tail becomes U+FFFD.
void DrainUtf8(std::string* pending, bool final, std::string* out);

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_TOKENIZER_H_
