// A model, its backend and engine, for the engine and memory tests (random tiny models and
// token ids: tiny_model.h; the rig of one made for memory modes: tiny_engine.h).
#ifndef KVFOLD_TESTS_TESTING_ENGINE_RIG_H_
#define KVFOLD_TESTS_TESTING_ENGINE_RIG_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "inference_svc/engine/engine.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"
#include "tests/testing/tiny_model.h"

namespace kvfold::testing {

// A model, the backend it runs on and its engine (destroyed engine first).
struct Rig {
  model::ModelFile model;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<engine::Engine> engine;
};

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_TESTING_ENGINE_RIG_H_
