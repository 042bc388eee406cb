// stories260K on an in-process CPU engine (one thread; a full-mode session, or a memory-mode
// one with a given projector), for the HTTP API tests that compare a replica's answers
// with the engine's own logits.
#ifndef KVFOLD_TESTS_INTEGRATION_REFERENCE_ENGINE_H_
#define KVFOLD_TESTS_INTEGRATION_REFERENCE_ENGINE_H_

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/memory_session.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"
#include "tests/integration/http_api_fixture.h"

namespace kvfold::testing {

class ReferenceSession {
 public:
  // The shared model with `prompt` prefilled; a failure is a test failure and ok() false.
  // `projector_dir` non-empty: a memory-mode session with that projector.
  explicit ReferenceSession(const std::vector<int32_t>& prompt,
                            const std::string& projector_dir = "") {
    auto model = model::LoadModel(SharedModel());
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return;
    model_.emplace(std::move(*model));
    kernels::CpuBackendOptions backend_options;
    backend_options.num_threads = 1;
    backend_ = kernels::CreateCpuBackend(backend_options);
    engine::EngineOptions options;
    options.kv_pool_bytes = 16 << 20;
    auto engine = engine::Engine::Create(*model_, backend_.get(), options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return;
    engine_ = std::move(*engine);
    absl::StatusOr<std::unique_ptr<engine::Session>> session;
    if (projector_dir.empty()) {
      session = engine::CreatePlainSession(engine_.get(), engine::SessionOptions());
    } else {
      auto projector = memory::Projector::Load(projector_dir);
      EXPECT_TRUE(projector.ok()) << projector.status();
      if (!projector.ok()) return;
      projector_ = std::move(*projector);
      session =
          memory::CreateSession(engine_.get(), {.mode = core::KvMode::kMemory}, projector_.get());
    }
    EXPECT_TRUE(session.ok()) << session.status();
    if (!session.ok()) return;
    session_ = std::move(*session);
    const absl::Status s = session_->Prefill(prompt);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) session_.reset();
  }

  bool ok() const { return session_ != nullptr; }
  // The logits after the last fed token (empty when !ok()).
  std::span<const float> Logits() const {
    return ok() ? session_->Logits() : std::span<const float>();
  }
  void Append(int32_t id) {
    if (!ok()) return;
    const absl::Status s = session_->Append(id);
    EXPECT_TRUE(s.ok()) << s;
  }

 private:
  std::optional<model::ModelFile> model_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<memory::Projector> projector_;
  std::unique_ptr<engine::Session> session_;
};

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INTEGRATION_REFERENCE_ENGINE_H_
