#include "inference_svc/runtime/session_factory.h"

#include "inference_svc/memory/memory_session.h"

namespace kvfold::runtime {

Scheduler::SessionFactory MakeSessionFactory(engine::Engine* engine,
                                             const memory::Projector* projector) {
  return [engine, projector](const SessionSpec& spec)
             -> absl::StatusOr<std::unique_ptr<engine::Session>> {
    if (IsMemoryMode(spec.mode) && projector == nullptr) {
      return absl::FailedPreconditionError("memory modes need a projector (--projector)");
    }
    engine::SessionOptions options;
    options.mode = spec.mode;
    options.window_size = spec.mode == core::KvMode::kFull ? 1 << 30 : spec.window_size;
    options.sink_tokens = spec.sink_tokens;
    return memory::CreateSession(engine, options, projector);
  };
}

}  // namespace kvfold::runtime
