// The one file that includes libsentencepiece (see the header for why no Abseil here).
#include "inference_svc/tokenizer/sentencepiece_backend.h"

#include <sentencepiece_processor.h>

namespace kvfold::tokenizer_internal {

struct SentencePieceBackend::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceBackend::SentencePieceBackend() : impl_(std::make_unique<Impl>()) {}
SentencePieceBackend::~SentencePieceBackend() = default;

std::unique_ptr<SentencePieceBackend> SentencePieceBackend::Load(const std::string& serialized,
                                                                 std::string* error) {
  std::unique_ptr<SentencePieceBackend> backend(new SentencePieceBackend());
  const auto status = backend->impl_->sp.LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return backend;
}

bool SentencePieceBackend::Encode(std::string_view text, std::vector<int>* ids,
                                  std::string* error) const {
  const auto status = impl_->sp.Encode(text, ids);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

std::string SentencePieceBackend::DecodeIds(const std::vector<int>& ids) const {
  return impl_->sp.DecodeIds(ids);
}

int SentencePieceBackend::piece_size() const { return impl_->sp.GetPieceSize(); }
std::string SentencePieceBackend::IdToPiece(int id) const { return impl_->sp.IdToPiece(id); }
float SentencePieceBackend::GetScore(int id) const { return impl_->sp.GetScore(id); }
bool SentencePieceBackend::IsByte(int id) const { return impl_->sp.IsByte(id); }
bool SentencePieceBackend::IsControl(int id) const { return impl_->sp.IsControl(id); }
bool SentencePieceBackend::IsUnknown(int id) const { return impl_->sp.IsUnknown(id); }
bool SentencePieceBackend::IsUnused(int id) const { return impl_->sp.IsUnused(id); }
int SentencePieceBackend::bos_id() const { return impl_->sp.bos_id(); }
int SentencePieceBackend::eos_id() const { return impl_->sp.eos_id(); }
int SentencePieceBackend::unk_id() const { return impl_->sp.unk_id(); }

}  // namespace kvfold::tokenizer_internal
