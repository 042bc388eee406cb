// A CPU engine over a random tiny model (tiny_model.h, in a Rig) and random memory
// projectors for it: the fixture of the memory-mode and checkpoint tests. Tests that
// include this link kvfold::engine and kvfold::memory.
#ifndef KVFOLD_TESTS_TESTING_TINY_ENGINE_H_
#define KVFOLD_TESTS_TESTING_TINY_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/memory/random_projector.h"
#include "kernels/backend.h"
#include "tests/testing/engine_rig.h"
#include "tests/testing/tiny_model.h"

namespace kvfold::testing {

// The default TinyShape's model of `seed` on a CPU backend of `backend_options`.
inline std::unique_ptr<Rig> MakeTinyEngine(uint64_t seed, const engine::EngineOptions& options,
                                           const kernels::CpuBackendOptions& backend_options = {
                                               .num_threads = 2}) {
  auto f = std::make_unique<Rig>();
  f->model = RandomTinyModel(seed);
  f->backend = kernels::CreateCpuBackend(backend_options);
  auto engine = engine::Engine::Create(f->model, f->backend.get(), options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (engine.ok()) f->engine = *std::move(engine);
  return f;
}

// A projector config for `engine`: M memory slots of its hidden size, 4 heads, FFN x2, one
// input layer, window W and chunk C; callers set the other fields before making it.
inline memory::ProjectorConfig TinyProjectorConfig(const engine::Engine& engine, int mem_slots,
                                                   int window, int chunk) {
  memory::ProjectorConfig c;
  c.mem_slots = mem_slots;
  c.hidden_size = engine.config().hidden_size;
  c.num_heads = 4;
  c.ffn_mult = 2;
  c.window_size = window;
  c.chunk_size = chunk;
  c.input_layers = 1;
  c.model_fingerprint = engine.fingerprint();
  return c;
}

// Random weights of `config` (RandomProjectorTensors, embedding RMS 1), named by the seed.
inline std::unique_ptr<memory::Projector> RandomTinyProjector(const memory::ProjectorConfig& config,
                                                              uint64_t seed,
                                                              const std::string& name) {
  auto p = memory::Projector::FromTensors(config,
                                          memory::RandomProjectorTensors(config, 1.0f, seed), name);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_TESTING_TINY_ENGINE_H_
