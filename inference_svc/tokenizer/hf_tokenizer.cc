#include "inference_svc/tokenizer/hf_tokenizer.h"

namespace kvfold {

struct HfTokenizer::Impl {};
HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Parse(const std::string& json,
                                                                const std::string& dir) {
  return absl::UnimplementedError("tokenizer.json support is not implemented yet");
}
absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view, bool) const {
  return absl::UnimplementedError("tokenizer.json");
}
std::string_view HfTokenizer::TokenBytes(int32_t) const { return {}; }
bool HfTokenizer::IsSpecial(int32_t) const { return false; }
bool HfTokenizer::StartsWithDummySpace(int32_t) const { return false; }
int32_t HfTokenizer::vocab_size() const { return 0; }
int32_t HfTokenizer::bos_id() const { return -1; }
int32_t HfTokenizer::eos_id() const { return -1; }

}  // namespace kvfold
