// Random (untrained) projectors for tests, benchmarks and the demo until a trained one
// exists. Deterministic by seed on every platform (own splitmix64 + Box-Muller).
#ifndef KVFOLD_INFERENCE_SVC_MEMORY_RANDOM_PROJECTOR_H_
#define KVFOLD_INFERENCE_SVC_MEMORY_RANDOM_PROJECTOR_H_

#include <cstdint>
#include <span>

#include "inference_svc/memory/projector.h"
#include "inference_svc/memory/safetensors_lite.h"

namespace kvfold::memory {

// Initialisation: queries ~ N(0, embed_rms^2); every Linear weight ~ N(0, 1/in_features);
// biases 0; LayerNorm weights 1 and biases 0, except ln_out.weight = embed_rms, so the
// memory vectors have the RMS of the model's token embeddings (they are fed as input
// embeddings). `config` must be valid (hidden_size % num_heads == 0).
Fp32TensorMap RandomProjectorTensors(const ProjectorConfig& config, float embed_rms, uint64_t seed);

// sqrt(mean(x^2)) over `values` (the token-embedding table).
float RootMeanSquare(std::span<const float> values);

}  // namespace kvfold::memory

#endif  // KVFOLD_INFERENCE_SVC_MEMORY_RANDOM_PROJECTOR_H_
