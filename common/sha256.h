// SHA-256 (OpenSSL EVP) for model and projector fingerprints.
#ifndef KVFOLD_COMMON_SHA256_H_
#define KVFOLD_COMMON_SHA256_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace kvfold {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // Lower-case hex digest (64 characters). Call once.
  std::string HexDigest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string Sha256Hex(std::string_view bytes);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_SHA256_H_
