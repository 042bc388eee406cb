// Internal state of HfTokenizer, shared by hf_tokenizer.cc (parsing) and
// hf_tokenizer_encode.cc (the encode pipeline). Not part of the public API.
#ifndef KVFOLD_INFERENCE_SVC_TOKENIZER_HF_TOKENIZER_IMPL_H_
#define KVFOLD_INFERENCE_SVC_TOKENIZER_HF_TOKENIZER_IMPL_H_

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "inference_svc/tokenizer/hf_tokenizer.h"
#include "inference_svc/tokenizer/pretokenizer.h"
#include "inference_svc/tokenizer/string_map.h"
#include "inference_svc/tokenizer/unicode_tables.h"

namespace kvfold {

struct HfTokenizer::Impl {
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  struct Added {
    std::string content;
    int32_t id;
    bool special;
  };
  struct Step {  // one normalizer
    enum Kind { kPrepend, kReplace } kind;
    std::string from;  // kPrepend: the prefix; kReplace: the literal to replace
    std::string to;
  };
  struct PreTokenizer {
    enum Kind { kRegex, kLiteral, kByteLevel, kMetaspace } kind = kRegex;
    tokenizer_internal::SplitPattern pattern = tokenizer_internal::SplitPattern::kGpt2;
    std::string literal;  // kLiteral: the split string; kMetaspace: the replacement
    bool add_prefix_space = false;  // kByteLevel
    bool use_regex = true;          // kByteLevel
    std::string prepend;            // kMetaspace: always | first | never
    bool split = true;              // kMetaspace
  };

  // Model.
  tokenizer_internal::StringMap<int32_t> vocab;  // piece (and added content) -> id
  std::vector<std::string> pieces;               // id -> piece ("" for unused ids)
  std::unordered_map<uint64_t, Merge> merges;    // PairKey(a, b) -> rank, merged id
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  int32_t unk_id = -1;
  std::array<int32_t, 256> byte_ids{};  // byte_fallback: id of "<0xAB>", -1 if absent

  std::vector<Added> added;
  std::array<std::vector<int32_t>, 256> added_by_first_byte;  // indices into `added`
  std::vector<Step> normalizer_steps;
  std::vector<PreTokenizer> pre_tokenizers;

  bool byte_level = false;   // GPT-2 byte<->unicode alphabet
  std::string metaspace;     // "▁" for SentencePiece-style vocabularies, else empty
  bool dummy_prefix = false; // a metaspace is prepended to the text
  std::array<std::string, 256> byte_to_unicode;
  std::unordered_map<uint32_t, unsigned char> unicode_to_byte;

  int32_t bos_id = -1;
  int32_t eos_id = -1;

  // Decode tables.
  std::vector<std::string> token_bytes;
  std::vector<bool> special;
  std::vector<bool> dummy_space;

  std::vector<std::string> approximations;
};

}  // namespace kvfold

#endif  // KVFOLD_INFERENCE_SVC_TOKENIZER_HF_TOKENIZER_IMPL_H_
