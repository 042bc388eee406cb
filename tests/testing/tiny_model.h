// Random tiny Llama/Qwen2 models for tests, built by the same generator as
// tools/make_random_model (inference_svc/model/random_model.h), and seeded token ids.
#ifndef KVFOLD_TESTS_TESTING_TINY_MODEL_H_
#define KVFOLD_TESTS_TESTING_TINY_MODEL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference_svc/model/config.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/random_model.h"
#include "kernels/backend.h"

namespace kvfold::testing {

// Odd sizes on purpose (head_dim 8, vocab 97) so no kernel gets a power of two for free.
struct TinyShape {
  int hidden_size = 48;
  int num_layers = 3;
  int num_heads = 6;
  int num_kv_heads = 2;
  int intermediate_size = 80;
  int vocab_size = 97;
  bool qwen2 = false;  // Qwen2ForCausalLM: q/k/v biases and tied embeddings
  int max_position_embeddings = 4096;
};

// Hidden 96, 2 layers, 6 heads / 2 KV heads of 16, intermediate 200, vocab 261: head_dim
// 16 as the CUDA kernels' vector paths want (the CUDA-vs-CPU engine tests).
inline TinyShape Tiny96(bool qwen2) {
  return {.hidden_size = 96, .num_layers = 2, .num_heads = 6, .num_kv_heads = 2,
          .intermediate_size = 200, .vocab_size = 261, .qwen2 = qwen2};
}

inline model::ModelConfig TinyConfig(const TinyShape& s) {
  model::ModelConfig c;
  c.architecture = s.qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.hidden_size = s.hidden_size;
  c.intermediate_size = s.intermediate_size;
  c.num_layers = s.num_layers;
  c.num_heads = s.num_heads;
  c.num_kv_heads = s.num_kv_heads;
  c.head_dim = s.hidden_size / s.num_heads;
  c.vocab_size = s.vocab_size;
  c.max_position_embeddings = s.max_position_embeddings;
  c.qkv_bias = s.qwen2;
  c.tie_word_embeddings = s.qwen2;
  return c;
}

inline model::ModelFile RandomTinyModel(uint64_t seed, const TinyShape& shape = {},
                                        core::DType dtype = core::DType::kF32) {
  return model::MakeRandomModel(TinyConfig(shape), seed, dtype);
}

// The named "tiny" shape (random_model.h) written as an F32 HF directory, for tests that
// start the servers on a model path.
inline absl::Status WriteTinyModel(const std::string& dir, uint64_t seed) {
  absl::StatusOr<model::ModelConfig> config = model::NamedShape("tiny");
  if (!config.ok()) return config.status();
  return model::WriteHfDirectory(model::MakeRandomModel(*config, seed, core::DType::kF32), dir,
                                 core::DType::kF32);
}

// n token ids in [0, vocab), seeded (mt19937_64).
inline std::vector<int32_t> RandomIds(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

// An F32 tensor's values.
inline std::vector<float> TensorFloats(const model::ModelFile& m, const std::string& name) {
  const model::HostTensor& t = m.tensors.at(name);
  const float* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.numel());
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_TESTING_TINY_MODEL_H_
