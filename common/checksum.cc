#include "common/checksum.h"

#include <xxhash.h>

namespace kvfold {

struct Xxh3Hasher::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

Xxh3Hasher::Xxh3Hasher() : state_(std::make_unique<State>()) { XXH3_64bits_reset(state_->s); }
Xxh3Hasher::~Xxh3Hasher() = default;

void Xxh3Hasher::Update(const void* data, size_t size) {
  XXH3_64bits_update(state_->s, data, size);
}

uint64_t Xxh3Hasher::Digest() const { return XXH3_64bits_digest(state_->s); }

uint64_t Xxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace kvfold
