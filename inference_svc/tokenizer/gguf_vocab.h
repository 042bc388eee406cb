// The tokenizer inside a GGUF model file (docs/tokenizers.md, "GGUF vocabularies"):
// - `tokenizer.ggml.model` "llama": a SentencePiece BPE vocabulary (tokens with U+2581,
//   scores, token types), read into the SentencePiece tokenizer with Llama's normalizer
//   (identity, dummy prefix unless `tokenizer.ggml.add_space_prefix` is false, whitespace
//   kept), BOS and EOS from `tokenizer.ggml.bos_token_id` / `eos_token_id`;
// - "gpt2": a byte-level BPE vocabulary (tokens, `tokenizer.ggml.merges`, token types) with
//   the pre-tokenizer llama.cpp names in `tokenizer.ggml.pre` (llama-bpe, qwen2, gpt-2),
//   read as the tokenizer.json it came from (HfTokenizer).
// Other vocabularies and pre-tokenizers are Unimplemented: put the model's tokenizer.json
// next to the file.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_GGUF_VOCAB_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_GGUF_VOCAB_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace kvfold {

// InvalidArgument for a vocabulary whose arrays are missing, of the wrong type or of
// different lengths, or whose token types or special ids are out of range.
absl::StatusOr<std::unique_ptr<Tokenizer>> GgufTokenizer(const gguf::File& file,
                                                         std::string_view what);

// The vocabulary as the file kvfold and Hugging Face read: "tokenizer.model" (a
// SentencePiece ModelProto) for "llama", "tokenizer.json" for "gpt2".
struct GgufTokenizerFile {
  std::string name;
  std::string contents;
};
absl::StatusOr<GgufTokenizerFile> GgufVocabularyFile(const gguf::File& file, std::string_view what);

// Whether `file` holds a vocabulary GgufTokenizer reads.
bool HasGgufVocabulary(const gguf::File& file);

// The tokenizer_config.json fields `file` gives, those it has: chat_template
// (tokenizer.chat_template), bos_token and eos_token (the pieces of its BOS and EOS ids).
nlohmann::json GgufTokenizerConfig(const gguf::File& file);

// `file`'s vocabulary written into directory `dir` as its GgufVocabularyFile (which
// libsentencepiece or Hugging Face and Tokenizer::Load read), and its GgufTokenizerConfig,
// when not empty, as tokenizer_config.json: what a converted model directory needs to
// tokenize and chat as the GGUF file did. GgufTokenizer's errors; Internal when a file
// cannot be written.
absl::Status WriteGgufTokenizerFiles(const gguf::File& file, std::string_view what,
                                     const std::string& dir);

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_GGUF_VOCAB_H_
