// XXH3-64 checksums (Debian's libxxhash) for memory blocks and store records.
#ifndef KVFOLD_COMMON_CHECKSUM_H_
#define KVFOLD_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace kvfold {

// Incremental XXH3-64 (seed 0). Update() any number of times, then Digest().
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;

  void Update(const void* data, size_t size);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

uint64_t Xxh3(const void* data, size_t size);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_CHECKSUM_H_
