// The engine-session factory the Scheduler uses: full/sliding/sink through the engine's
// CreatePlainSession, memory/memory_only through kvfold::memory's memory-mode session.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_SESSION_FACTORY_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_SESSION_FACTORY_H_

#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/service/scheduler.h"

namespace kvfold::service {

// `engine` and `projector` (may be null: memory modes FAILED_PRECONDITION) must outlive
// the returned factory. The SessionConfig must be resolved (no UNSPECIFIED mode).
Scheduler::SessionFactory MakeSessionFactory(engine::Engine* engine,
                                             const memory::Projector* projector);

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_SESSION_FACTORY_H_
