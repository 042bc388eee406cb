#include "inference_svc/service/validation.h"

#include <random>

namespace kvfold::service {

std::string NewSessionId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id = "s-";
  for (int i = 0; i < 16; ++i) id.push_back(kHex[rng() & 15]);
  return id;
}

}  // namespace kvfold::service
