#include "inference_svc/memory/random_projector.h"

#include <cmath>

#include "common/rng.h"

namespace kvfold::memory {
namespace {

class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : state_(seed) {}
  double Normal() {
    // Box-Muller on two 53-bit uniforms in (0, 1].
    const double u1 = (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(Next() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t Next() { return SplitMix64(state_); }
  uint64_t state_;
};

}  // namespace

float RootMeanSquare(std::span<const float> values) {
  if (values.empty()) return 0.0f;
  double sum = 0.0;
  for (float v : values) sum += static_cast<double>(v) * v;
  return static_cast<float>(std::sqrt(sum / static_cast<double>(values.size())));
}

Fp32TensorMap RandomProjectorTensors(const ProjectorConfig& config, float embed_rms, uint64_t seed) {
  NormalRng rng(seed);
  Fp32TensorMap tensors;
  // ProjectorTensorShapes is sorted by name, so the draw order is fixed.
  for (const auto& [name, shape] : ProjectorTensorShapes(config)) {
    Fp32Tensor t;
    t.shape = shape;
    size_t count = 1;
    for (int64_t s : shape) count *= static_cast<size_t>(s);
    t.data.assign(count, 0.0f);
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (name == "queries") {
      for (float& v : t.data) v = static_cast<float>(embed_rms * rng.Normal());
    } else if (name.rfind("ln_", 0) == 0) {
      if (!is_bias) t.data.assign(count, name == "ln_out.weight" ? embed_rms : 1.0f);
    } else if (!is_bias) {
      const double stddev = 1.0 / std::sqrt(static_cast<double>(shape[1]));
      for (float& v : t.data) v = static_cast<float>(stddev * rng.Normal());
    }
    tensors.emplace(name, std::move(t));
  }
  return tensors;
}

}  // namespace kvfold::memory
