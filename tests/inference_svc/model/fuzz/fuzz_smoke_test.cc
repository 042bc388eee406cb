// Always-on smoke run of the fuzz entry points: thousands of seeded mutations (bit flips,
// truncations, length-field overwrites, header edits) of valid files through both parsers.
#include <random>

#include "gtest/gtest.h"
#include "inference_svc/model/random_model.h"
#include "tests/inference_svc/model/fuzz/parsers_fuzz.h"

namespace kvfold::fuzz {
namespace {

std::string Mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string b = seed;
  const int edits = 1 + rng() % 4;
  for (int e = 0; e < edits && !b.empty(); ++e) {
    switch (rng() % 5) {
      case 0:
        b[rng() % b.size()] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:
        b.resize(rng() % b.size());
        break;
      case 2: {  // overwrite a 4 or 8 byte field near the start with an extreme value
        const uint64_t values[] = {0, 1, 0x7fffffff, 0xffffffff, 0x80000000, ~0ULL, 1ULL << 40};
        const uint64_t v = values[rng() % 7];
        const size_t at = rng() % std::min<size_t>(b.size(), 64);
        std::memcpy(b.data() + at, &v, std::min<size_t>(8, b.size() - at));
        break;
      }
      case 3:
        b.insert(rng() % b.size(), std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      default: {  // JSON-ish damage inside the first kilobyte
        const char junk[] = "{}[]\",:0-9e";
        b[8 + rng() % std::min<size_t>(b.size() > 8 ? b.size() - 8 : 1, 1024) % b.size()] =
            junk[rng() % (sizeof(junk) - 1)];
      }
    }
  }
  return b;
}

TEST(FuzzSmokeTest, MutatedSafetensorsNeverCrash) {
  auto config = model::NamedShape("tiny");
  model::ModelFile m = model::MakeRandomModel(*config, 1, core::DType::kF16);
  const std::string seed = model::SerializeSafetensors(m.tensors);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    const std::string b = Mutate(seed, rng);
    FuzzSafetensors(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }
}

TEST(FuzzSmokeTest, MutatedLlama2cNeverCrash) {
  const int32_t header[7] = {16, 24, 2, 4, 2, 11, 8};
  std::string seed(reinterpret_cast<const char*>(header), sizeof(header));
  seed.resize(28 + 4 * (11 * 16 + 2 * 16 + 2 * 256 + 2 * 2 * 8 * 16 + 2 * 256 + 2 * 16 +
                        3 * 2 * 24 * 16 + 16 + 8 * 4),
              '\0');
  ASSERT_TRUE(model::ParseLlama2c(std::make_shared<const std::string>(seed)).ok());
  std::mt19937_64 rng(9);
  for (int i = 0; i < 3000; ++i) {
    const std::string b = Mutate(seed, rng);
    FuzzLlama2c(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }
}

}  // namespace
}  // namespace kvfold::fuzz
