// The tokenizer inside a GGUF model file (docs/tokenizers.md, "GGUF vocabularies"): a
// `tokenizer.ggml.model` of "llama" is a SentencePiece BPE vocabulary (tokens with U+2581,
// scores, token types), read into the SentencePiece tokenizer with Llama's normalizer
// (identity, dummy prefix unless `tokenizer.ggml.add_space_prefix` is false, whitespace
// kept), BOS and EOS from `tokenizer.ggml.bos_token_id` / `eos_token_id`. Other vocabularies
// ("gpt2" BPE, ...) are Unimplemented: put the model's tokenizer.json next to the file.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_GGUF_VOCAB_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_GGUF_VOCAB_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/gguf.h"
#include "inference_svc/tokenizer/sentencepiece_tokenizer.h"

namespace kvfold {

// InvalidArgument for a vocabulary whose arrays are missing, of the wrong type or of
// different lengths, or whose token types or special ids are out of range.
absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> GgufTokenizer(const gguf::File& file,
                                                                      std::string_view what);

// Whether `file` holds a vocabulary GgufTokenizer reads.
bool HasGgufVocabulary(const gguf::File& file);

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_GGUF_VOCAB_H_
