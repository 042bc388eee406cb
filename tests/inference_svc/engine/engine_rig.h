// Shared helpers of the engine tests: seeded token ids and a model + backend + engine rig.
#ifndef KVFOLD_TESTS_INFERENCE_SVC_ENGINE_ENGINE_RIG_H_
#define KVFOLD_TESTS_INFERENCE_SVC_ENGINE_ENGINE_RIG_H_

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "inference_svc/engine/engine.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"

namespace kvfold::testing {

// n token ids in [0, vocab), seeded (mt19937_64).
inline std::vector<int32_t> RandomIds(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

// A model, the backend it runs on and its engine (destroyed engine first).
struct Rig {
  model::ModelFile model;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<engine::Engine> engine;
};

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INFERENCE_SVC_ENGINE_ENGINE_RIG_H_
