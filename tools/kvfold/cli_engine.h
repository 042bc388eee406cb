// Helpers shared by the engine subcommands (generate, logits, eval, info, convert): shared
// flags and loading a model into an Engine with a session of any mode.
#ifndef KVFOLD_TOOLS_KVFOLD_CLI_ENGINE_H_
#define KVFOLD_TOOLS_KVFOLD_CLI_ENGINE_H_

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"

namespace kvfold::cli {

// The flags the engine commands share (generate, logits, eval add them with AddEngineFlags).
struct EngineFlags {
  std::string model;      // --model: HF directory, GGUF file or llama2.c checkpoint
  std::string projector;  // --projector DIR (memory modes); empty = none
  std::string backend = "cpu";
  int threads = 0;  // 0 = the CPUs this process may use
  std::string kv_dtype = "f32";
};

// --model (required), --projector, --backend, --threads, --kv-dtype.
void AddEngineFlags(CLI::App& app, EngineFlags& flags);

struct LoadedEngine {
  model::ModelFile model;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<memory::Projector> projector;  // when --projector is given
};

// Engine options from --kv-dtype f32|f16|int8 (engine::ParseKvDType; InvalidArgument naming
// the flag for other values).
absl::StatusOr<engine::EngineOptions> EngineOptionsFromFlags(const EngineFlags& flags);

absl::StatusOr<LoadedEngine> LoadEngine(const std::string& model_path,
                                        const std::string& backend_name, int threads,
                                        const std::string& projector_dir,
                                        const engine::EngineOptions& options = {});

// Any mode: plain modes from the engine, memory modes through memory::CreateSession.
absl::StatusOr<std::unique_ptr<engine::Session>> MakeSession(LoadedEngine& loaded,
                                                             const std::string& mode,
                                                             int window, int sink,
                                                             bool fp16_memory = true);

// Exit code for a status: 2 for InvalidArgument/NotFound/FailedPrecondition/Unimplemented
// (bad input), 1 otherwise. Prints "kvfold <cmd>: message" to stderr.
int FailWith(const char* cmd, const absl::Status& status);

}  // namespace kvfold::cli

#endif  // KVFOLD_TOOLS_KVFOLD_CLI_ENGINE_H_
