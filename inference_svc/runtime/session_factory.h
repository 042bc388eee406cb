// The engine-session factory the Scheduler uses: full/sliding/sink through the engine's
// CreatePlainSession, memory/memory_only through kvfold::memory's memory-mode session
// (memory::CreateSession is the one factory for every mode).
#ifndef KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_FACTORY_H_
#define KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_FACTORY_H_

#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/runtime/scheduler.h"

namespace kvfold::runtime {

// `engine` and `projector` (may be null: memory modes FAILED_PRECONDITION) must outlive
// the returned factory. The spec must be resolved (Runtime::ResolveSpec).
Scheduler::SessionFactory MakeSessionFactory(engine::Engine* engine,
                                             const memory::Projector* projector);

}  // namespace kvfold::runtime

#endif  // KVFOLD_INFERENCE_SVC_RUNTIME_SESSION_FACTORY_H_
