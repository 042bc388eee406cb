// StoreSessions: the runtime's SessionStore on kvfold-memory (through the StoreGateway).
// Checkpoints become memory blocks here (memory/session_block.h) and blocks are verified
// against this replica's model and projector when read.
//
// Errors that describe the connection to the store (UNAVAILABLE, DEADLINE_EXCEEDED,
// UNKNOWN, INTERNAL, CANCELLED from the transport) keep their code but not their message,
// which names the store's internal address: clients get "the memory store is unavailable"
// and the detail goes to the replica's log (StoreError).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_STORE_SESSIONS_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_STORE_SESSIONS_H_

#include <string>

#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/runtime/session_store.h"
#include "inference_svc/service/store_gateway.h"

namespace kvfold::service {

// `status` from a store call, safe to return to a client (see the file comment).
absl::Status StoreError(const absl::Status& status);

class StoreSessions final : public runtime::SessionStore {
 public:
  // All must outlive this object; projector may be null (no memory modes).
  StoreSessions(StoreGateway* gateway, const engine::Engine* engine,
                const memory::Projector* projector);

  absl::StatusOr<uint64_t> HeadVersion(const runtime::Caller& caller,
                                       const std::string& session_id) override;
  absl::StatusOr<runtime::Checkpoint> Load(const runtime::Caller& caller,
                                           const std::string& session_id,
                                           uint64_t version) override;
  absl::StatusOr<uint64_t> Commit(const runtime::Caller& caller, const std::string& session_id,
                                  uint64_t expected_head,
                                  const runtime::Checkpoint& checkpoint) override;

 private:
  StoreGateway* const gateway_;
  const engine::Engine* const engine_;
  const memory::Projector* const projector_;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_STORE_SESSIONS_H_
