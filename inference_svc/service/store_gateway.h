// StoreGateway: the replica's view of memory_svc, on top of the memory_svc::StoreClient
// (memory_svc/client). Every call carries the caller's identity: the bearer token the
// caller presented to this replica is forwarded to the store, so the store scopes the
// call to the same tenant (docs/service.md, "Tenants"). Without a caller token the
// replica's store token is used (empty = no authorization metadata). Tokens travel as
// per-call metadata on one channel: the gateway keeps nothing per token.
//
// Status codes are the store's, unchanged (NOT_FOUND, ABORTED on a lost compare-and-set,
// DATA_LOSS, UNAVAILABLE when the store cannot be reached, ...).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_STORE_GATEWAY_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_STORE_GATEWAY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "inference_svc/memory/memory_block.h"
#include "kvfold/v1/memory_store.pb.h"

namespace kvfold::service {

struct StoreGatewayOptions {
  std::string address;  // host:port of kvfold-memory
  std::string tls_ca;   // PEM CA for TLS; empty = plaintext
  // PEM client certificate chain and private key for a store that requires mTLS (both
  // or neither; they need tls_ca).
  std::string tls_cert;
  std::string tls_key;
  // Per-call deadline. Default: 30 s.
  double call_timeout_s = 30;
};

class StoreGateway {
 public:
  static absl::StatusOr<std::unique_ptr<StoreGateway>> Create(const StoreGatewayOptions& options);
  virtual ~StoreGateway() = default;

  // `token`: the bearer token to present ("" = none).
  virtual absl::StatusOr<v1::SessionInfo> GetSessionInfo(const std::string& token,
                                                         const std::string& session_id) = 0;
  // version 0 = head. `info` (optional) receives the version's info.
  virtual absl::StatusOr<memory::MemoryBlock> GetBlock(const std::string& token,
                                                       const std::string& session_id,
                                                       uint64_t version,
                                                       v1::VersionInfo* info) = 0;
  // Compare-and-set on expected_head_version (0 = create). Returns the new version.
  virtual absl::StatusOr<uint64_t> PutBlock(const std::string& token, const std::string& session_id,
                                            uint64_t expected_head_version,
                                            const memory::MemoryBlock& block) = 0;
  virtual absl::StatusOr<v1::SessionInfo> SetHead(const std::string& token,
                                                  const std::string& session_id,
                                                  uint64_t version) = 0;
  virtual absl::StatusOr<v1::SessionInfo> Fork(const std::string& token,
                                               const std::string& source_session_id,
                                               uint64_t version,
                                               const std::string& new_session_id) = 0;
  // Returns the number of versions deleted.
  virtual absl::StatusOr<uint32_t> Delete(const std::string& token,
                                          const std::string& session_id) = 0;
  virtual absl::StatusOr<v1::StoreListSessionsResponse> ListSessions(
      const std::string& token, uint32_t page_size, const std::string& page_token) = 0;
  // OK when the store answers health checks with SERVING.
  virtual absl::Status CheckHealth() = 0;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_STORE_GATEWAY_H_
