#include "tools/kvfold/cli_engine.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/install_paths.h"
#include "inference_svc/memory/memory_session.h"

namespace kvfold::cli {

absl::StatusOr<std::map<std::string, std::string>> ParseEngineFlags(
    int argc, char** argv, const std::set<std::string>& valued,
    const std::set<std::string>& switches) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string full = argv[i];
    if (full.size() < 3 || full[0] != '-' || full[1] != '-') {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", full, "'"));
    }
    const std::string arg(full.begin() + 2, full.end());
    const std::string name = arg.substr(0, arg.find('='));
    if (switches.count(name) && arg.find('=') == std::string::npos) {
      flags.insert_or_assign(name, std::string(1, '1'));
      continue;
    }
    if (!valued.count(name)) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (arg.find('=') != std::string::npos) {
      flags[name] = arg.substr(arg.find('=') + 1);
    } else if (i + 1 < argc) {
      flags[name] = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
  }
  return flags;
}

absl::StatusOr<int64_t> IntFlag(const std::map<std::string, std::string>& flags,
                                const std::string& name, int64_t default_value) {
  auto it = flags.find(name);
  if (it == flags.end()) return default_value;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be an integer"));
  }
  return v;
}

absl::StatusOr<double> FloatFlag(const std::map<std::string, std::string>& flags,
                                 const std::string& name, double default_value) {
  auto it = flags.find(name);
  if (it == flags.end()) return default_value;
  double v;
  if (!absl::SimpleAtod(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a number"));
  }
  return v;
}

absl::StatusOr<engine::EngineOptions> EngineOptionsFromFlags(
    const std::map<std::string, std::string>& flags) {
  engine::EngineOptions options;
  if (auto it = flags.find("kv-dtype"); it != flags.end()) {
    absl::StatusOr<engine::KvDType> dtype = engine::ParseKvDType(it->second);
    if (!dtype.ok())
      return absl::InvalidArgumentError(absl::StrCat("--kv-dtype: ", dtype.status().message()));
    options.kv_dtype = *dtype;
  }
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
  absl::StatusOr<engine::KvMode> kv_mode = engine::ParseKvMode(mode);
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
