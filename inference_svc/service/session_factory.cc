#include "inference_svc/service/session_factory.h"

#include "inference_svc/memory/memory_session.h"
#include "inference_svc/service/session_codec.h"

namespace kvfold::service {

Scheduler::SessionFactory MakeSessionFactory(engine::Engine* engine,
                                             const memory::Projector* projector) {
  return [engine, projector](const v1::SessionConfig& config)
             -> absl::StatusOr<std::unique_ptr<engine::Session>> {
    if (IsMemoryMode(config.mode()) && projector == nullptr) {
      return absl::FailedPreconditionError("memory modes need a projector (--projector)");
    }
    engine::SessionOptions options;
    options.mode = FromProtoMode(config.mode());
    options.window_size = config.mode() == v1::KV_MODE_FULL ? 1 << 30
                                                            : static_cast<int>(config.window_size());
    options.sink_tokens = static_cast<int>(config.sink_tokens());
    return memory::CreateSession(engine, options, projector);
  };
}

}  // namespace kvfold::service
