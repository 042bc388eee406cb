// The one file that includes libsentencepiece (see the header for why).
#include "tests/inference_svc/tokenizer/sentencepiece_reference.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kvfold::testing {

struct SentencePieceReference::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SentencePieceReference::SentencePieceReference() : impl_(std::make_unique<Impl>()) {}
SentencePieceReference::~SentencePieceReference() = default;

std::unique_ptr<SentencePieceReference> SentencePieceReference::Load(const std::string& serialized,
                                                                 std::string* error) {
  std::unique_ptr<SentencePieceReference> backend(new SentencePieceReference());
  const auto status = backend->impl_->sp.LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return backend;
}

std::unique_ptr<SentencePieceReference> SentencePieceReference::LoadFile(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string error;
  return Load(ss.str(), &error);
}

std::vector<int32_t> SentencePieceReference::EncodeIds(std::string_view text,
                                                       bool add_bos) const {
  std::vector<int> raw;
  std::string error;
  if (!Encode(text, &raw, &error)) {
    std::fprintf(stderr, "libsentencepiece encode failed: %s\n", error.c_str());
    std::abort();
  }
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(bos_id());
  ids.insert(ids.end(), raw.begin(), raw.end());
  return ids;
}

bool SentencePieceReference::Encode(std::string_view text, std::vector<int>* ids,
                                  std::string* error) const {
  const auto status = impl_->sp.Encode(text, ids);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

std::string SentencePieceReference::DecodeIds(const std::vector<int>& ids) const {
  return impl_->sp.DecodeIds(ids);
}

int SentencePieceReference::piece_size() const { return impl_->sp.GetPieceSize(); }
std::string SentencePieceReference::IdToPiece(int id) const { return impl_->sp.IdToPiece(id); }
float SentencePieceReference::GetScore(int id) const { return impl_->sp.GetScore(id); }
bool SentencePieceReference::IsByte(int id) const { return impl_->sp.IsByte(id); }
bool SentencePieceReference::IsControl(int id) const { return impl_->sp.IsControl(id); }
bool SentencePieceReference::IsUnknown(int id) const { return impl_->sp.IsUnknown(id); }
bool SentencePieceReference::IsUnused(int id) const { return impl_->sp.IsUnused(id); }
int SentencePieceReference::bos_id() const { return impl_->sp.bos_id(); }
int SentencePieceReference::eos_id() const { return impl_->sp.eos_id(); }
int SentencePieceReference::unk_id() const { return impl_->sp.unk_id(); }

}  // namespace kvfold::testing
