// Random models of named shapes, for tests and benchmarks (and tools/make_random_model,
// which writes the same tensors to disk). Deterministic by seed: each tensor is drawn
// from xoshiro256** seeded by (seed, tensor name), so the list order does not matter.
#ifndef KVFOLD_INFERENCE_SVC_MODEL_RANDOM_MODEL_H_
#define KVFOLD_INFERENCE_SVC_MODEL_RANDOM_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inference_svc/model/model_file.h"

namespace kvfold::model {

// llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b, tiny (hidden 64, 2 layers, 4 heads, 2 kv
// heads, vocab 256, intermediate 160), tiny-qwen2 (biases), tiny-mha, tiny-odd (hidden
// 72, 6 heads of 12, 2 kv heads, intermediate 200, vocab 263, 3 layers).
// InvalidArgument for unknown names.
absl::StatusOr<ModelConfig> NamedShape(const std::string& name);

// How a tensor is initialised: matrices U(+-sqrt(3/fan_in)), norms 1 + U(+-0.1),
// biases U(+-0.1), embeddings U(+-sqrt(3)).
enum class InitKind { kMatrix, kNorm, kBias, kEmbedding };

struct TensorSpec {
  std::vector<int64_t> shape;
  InitKind kind;
};

// Every tensor the config needs, by HF name.
std::map<std::string, TensorSpec> TensorSpecs(const ModelConfig& config);

// Writes the tensor's values (numel elements of dtype) to `out`.
void FillRandomTensor(const std::string& name, const TensorSpec& spec, uint64_t seed,
                      DType dtype, void* out);

// The whole model in memory. dtype F32, F16, BF16 or Q8 (the F32 values with rank-2
// tensors quantized; norms F32).
ModelFile MakeRandomModel(const ModelConfig& config, uint64_t seed, DType dtype);

}  // namespace kvfold::model

#endif  // KVFOLD_INFERENCE_SVC_MODEL_RANDOM_MODEL_H_
