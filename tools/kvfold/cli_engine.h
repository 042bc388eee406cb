// Helpers shared by the engine subcommands (generate, logits, info, convert): flag
// parsing and loading a model into an Engine with a session of any mode.
#ifndef KVFOLD_TOOLS_KVFOLD_CLI_ENGINE_H_
#define KVFOLD_TOOLS_KVFOLD_CLI_ENGINE_H_

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/model/model_file.h"
#include "kernels/backend.h"

namespace kvfold::cli {

// "--name value" / "--name=value" for names in `valued`, "--name" for names in `switches`.
// InvalidArgument for anything else.
absl::StatusOr<std::map<std::string, std::string>> ParseEngineFlags(
    int argc, char** argv, const std::set<std::string>& valued,
    const std::set<std::string>& switches);

// Integer/float flag with a default; InvalidArgument when not a number.
absl::StatusOr<int64_t> IntFlag(const std::map<std::string, std::string>& flags,
                                const std::string& name, int64_t default_value);
absl::StatusOr<double> FloatFlag(const std::map<std::string, std::string>& flags,
                                 const std::string& name, double default_value);

struct LoadedEngine {
  model::ModelFile model;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<memory::Projector> projector;  // when --projector is given
};

// Engine options from the flags every engine command accepts: --kv-dtype f32|int8
// (engine::ParseKvDType; InvalidArgument for other values). Commands list "kv-dtype" among
// their valued flags.
absl::StatusOr<engine::EngineOptions> EngineOptionsFromFlags(
    const std::map<std::string, std::string>& flags);

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
