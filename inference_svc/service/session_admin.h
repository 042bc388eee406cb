// SessionAdmin: the stored-session operations of kvfold's API — create, describe, list,
// delete, fork, roll back (docs/api.md, "InferenceService") — for the gRPC service and the
// HTTP front alike, so that both apply the same rules. The caller is authenticated
// already; session ids are checked here (INVALID_ARGUMENT), store errors come back as
// StoreError makes them (store_sessions.h).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_SESSION_ADMIN_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_SESSION_ADMIN_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "inference_svc/runtime/runtime.h"
#include "inference_svc/service/store_gateway.h"
#include "kvfold/v1/inference.pb.h"

namespace kvfold::service {

class SessionAdmin {
 public:
  // `kv_bytes_per_token`: what one resident token costs this replica's KV pool (a
  // Session's kv_bytes_resident). Both pointers must outlive the object.
  SessionAdmin(runtime::Runtime* runtime, StoreGateway* store, uint64_t kv_bytes_per_token)
      : runtime_(runtime), store_(store), kv_bytes_per_token_(kv_bytes_per_token) {}

  // Create and Fork describe the new session in `out` (as Get), or skip that read of its
  // head block when `out` is null.
  // An empty session_id gets a new random one (out->session_id()). Writes version 1.
  absl::Status Create(const runtime::Caller& caller, const v1::CreateSessionRequest& request,
                      v1::Session* out) const;
  // The store's info and the head block's header.
  absl::Status Get(const runtime::Caller& caller, const std::string& session_id,
                   v1::Session* out) const;
  // One page (page_size <= 1000) of the caller's sessions.
  absl::Status List(const runtime::Caller& caller, const v1::ListSessionsRequest& request,
                    v1::ListSessionsResponse* out) const;
  // Every version, and the replica's cached copy.
  absl::Status Delete(const runtime::Caller& caller, const std::string& session_id,
                      v1::DeleteSessionResponse* out) const;
  // A new session (new_session_id, or a random one) from a stored version.
  absl::Status Fork(const runtime::Caller& caller, const v1::ForkSessionRequest& request,
                    v1::Session* out) const;
  // An earlier version (>= 1) becomes the head; the replica's cached copy is dropped.
  absl::Status Rollback(const runtime::Caller& caller, const v1::RollbackSessionRequest& request,
                        v1::Session* out) const;

 private:
  runtime::Runtime* const runtime_;
  StoreGateway* const store_;
  const uint64_t kv_bytes_per_token_;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_SESSION_ADMIN_H_
