#include "tools/kvfold/cli_engine.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/install_paths.h"
#include "inference_svc/memory/memory_session.h"

namespace kvfold::cli {

void AddEngineFlags(CLI::App& app, EngineFlags& flags) {
  app.add_option("--model", flags.model, "model: HF directory, GGUF file or llama2.c checkpoint")
      ->required();
  app.add_option("--projector", flags.projector,
                 "projector directory for the memory modes ('auto': the installed one made for "
                 "this model)");
  app.add_option("--backend", flags.backend, "engine backend: cpu|cpu-ref|cuda[:N] (when built)");
  app.add_option("--threads", flags.threads, "compute threads (0 = the CPUs this process may use)")
      ->check(kvfold::NonNegative());
  app.add_option("--kv-dtype", flags.kv_dtype, "KV cache element type: f32|f16|int8");
}

absl::StatusOr<engine::EngineOptions> EngineOptionsFromFlags(const EngineFlags& flags) {
  engine::EngineOptions options;
  absl::StatusOr<core::DType> dtype = engine::ParseKvDType(flags.kv_dtype);
  if (!dtype.ok())
    return absl::InvalidArgumentError(absl::StrCat("--kv-dtype: ", dtype.status().message()));
  options.kv_dtype = *dtype;
  return options;
}

absl::StatusOr<LoadedEngine> LoadEngine(const std::string& model_path,
                                        const std::string& backend_name, int threads,
                                        const std::string& projector_dir,
                                        const engine::EngineOptions& options) {
  LoadedEngine out;
  absl::StatusOr<model::ModelFile> m = model::LoadModel(model_path);
  if (!m.ok()) return m.status();
  out.model = std::move(*m);
  absl::StatusOr<std::unique_ptr<kernels::Backend>> be = kernels::CreateBackend(backend_name, threads);
  if (!be.ok()) return be.status();
  out.backend = std::move(*be);
  absl::StatusOr<std::unique_ptr<engine::Engine>> e =
      engine::Engine::Create(out.model, out.backend.get(), options);
  if (!e.ok()) return e.status();
  out.engine = std::move(*e);
  std::string projector = projector_dir;
  if (projector == kAutoProjector) {
    // The installed projector made for this model (share/kvfold/projectors).
    absl::StatusOr<std::string> found = FindInstalledProjector(out.engine->fingerprint());
    if (!found.ok()) return found.status();
    projector = *found;
  }
  if (!projector.empty()) {
    absl::StatusOr<std::unique_ptr<memory::Projector>> p = memory::Projector::LoadForModel(
        projector, out.engine->fingerprint(), out.engine->config().hidden_size);
    if (!p.ok()) return p.status();
    if (absl::Status s = (*p)->UseEngineBackend(out.backend.get()); !s.ok()) return s;
    out.projector = std::move(*p);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<engine::Session>> MakeSession(LoadedEngine& loaded,
                                                             const std::string& mode,
                                                             int window, int sink,
                                                             bool fp16_memory) {
  absl::StatusOr<core::KvMode> kv_mode = core::ParseKvMode(mode);
  if (!kv_mode.ok()) return kv_mode.status();
  engine::SessionOptions options;
  options.mode = *kv_mode;
  options.window_size = window;
  options.sink_tokens = sink;
  return memory::CreateSession(loaded.engine.get(), options, loaded.projector.get(),
                               fp16_memory);
}

int FailWith(const char* cmd, const absl::Status& status) {
  std::fprintf(stderr, "kvfold %s: %s\n", cmd, status.ToString().c_str());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
      return 2;
    default:
      return 1;
  }
}

}  // namespace kvfold::cli
