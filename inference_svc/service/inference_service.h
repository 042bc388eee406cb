// InferenceServiceImpl: the gRPC InferenceService of a kvfold-inference replica.
//
// A thin adapter (synchronous gRPC handlers): authenticate, validate, talk to the store
// (StoreGateway), hand engine work to the Scheduler, stream its events back. No engine
// work runs on a handler thread. Status codes: proto/kvfold/v1/inference.proto and
// docs/api.md; behaviour: docs/service.md.
//
// Generate on any replica: the store's head is read first; a cached copy at that version
// continues at once, otherwise the head block is fetched and imported (a resume). After
// the turn the new state is written with compare-and-set on the head the turn started
// from; ABORTED reaches the client when another writer won, and the cached copy is dropped
// so the session stays consistent (the store is the truth).
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_SERVICE_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/server_context.h>

#include "common/auth.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/memory/projector.h"
#include "inference_svc/planner/model_spec.h"
#include "inference_svc/service/live_session.h"
#include "inference_svc/service/scheduler.h"
#include "inference_svc/service/service_config.h"
#include "inference_svc/service/session_cache.h"
#include "inference_svc/service/store_gateway.h"
#include "inference_svc/tokenizer/tokenizer.h"
#include "kvfold/v1/inference.grpc.pb.h"

namespace kvfold::service {

// Everything a service instance uses; all must outlive it. tokenizer, projector and
// tokens may be null (no text prompts / no memory modes / auth off).
struct ServiceDeps {
  const ServiceConfig* config = nullptr;
  engine::Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const memory::Projector* projector = nullptr;
  std::string projector_fingerprint;
  Scheduler* scheduler = nullptr;
  StoreGateway* store = nullptr;
  const TokenTable* tokens = nullptr;
};

class InferenceServiceImpl final : public v1::InferenceService::Service {
 public:
  explicit InferenceServiceImpl(const ServiceDeps& deps);

  // After this, every new call is UNAVAILABLE ("draining"); calls in flight continue.
  void StartDraining() { draining_.store(true); }

  grpc::Status CreateSession(grpc::ServerContext* context, const v1::CreateSessionRequest* request,
                             v1::Session* response) override;
  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GetSession(grpc::ServerContext* context, const v1::GetSessionRequest* request,
                          v1::Session* response) override;
  grpc::Status ListSessions(grpc::ServerContext* context, const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  grpc::Status DeleteSession(grpc::ServerContext* context, const v1::DeleteSessionRequest* request,
                             v1::DeleteSessionResponse* response) override;
  grpc::Status ForkSession(grpc::ServerContext* context, const v1::ForkSessionRequest* request,
                           v1::Session* response) override;
  grpc::Status RollbackSession(grpc::ServerContext* context,
                               const v1::RollbackSessionRequest* request,
                               v1::Session* response) override;
  grpc::Status EstimateKvCache(grpc::ServerContext* context,
                               const v1::EstimateKvCacheRequest* request,
                               v1::EstimateKvCacheResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;

  // KV bytes one token adds on this replica's engine (all layers, K and V).
  uint64_t kv_bytes_per_token() const { return kv_bytes_per_token_; }
  const LruByteCache<LiveSession>& cache() const { return cache_; }
  const std::string& replica_name() const { return replica_name_; }
  // Called once before serving (the bound address, when no --replica_name was given).
  void set_replica_name(const std::string& name) { replica_name_ = name; }

 private:
  struct Caller {
    std::string tenant;
    std::string store_token;  // forwarded to the store
  };
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContext& context) const;
  std::string CacheKey(const Caller& caller, const std::string& session_id) const;

  // Mode/window/sink defaults applied; FAILED_PRECONDITION for a memory mode without a
  // projector; INVALID_ARGUMENT for impossible geometry.
  absl::StatusOr<v1::SessionConfig> ResolveConfig(const v1::SessionConfig& requested) const;
  // A LiveSession rebuilt from a stored block (checked against this replica's model and
  // projector). `restore_state` receives the state to import.
  absl::StatusOr<std::shared_ptr<LiveSession>> LiveFromBlock(
      const Caller& caller, const std::string& session_id, const memory::MemoryBlock& block,
      uint64_t version, engine::SessionState* restore_state) const;
  absl::StatusOr<memory::MemoryBlock> BlockFromTurn(const LiveSession& live, const Turn& turn) const;
  // Runs a prefill-only turn (CreateSession's system prompt) to completion.
  absl::Status RunToCompletion(const std::shared_ptr<Turn>& turn) const;
  // Fills a Session message from the store (cached copy at head, else the head block).
  absl::Status DescribeSession(const Caller& caller, const std::string& session_id,
                               v1::Session* out);
  absl::StatusOr<std::vector<int32_t>> PromptIds(const v1::GenerateRequest& request,
                                                 bool session_empty) const;
  void CacheCommitted(const std::string& key, std::shared_ptr<LiveSession> live);
  engine::SamplingParams ToEngineSampling(const v1::SamplingParams& p) const;
  // KV bytes this turn adds to the pool at most: the mode's resident cap after the turn
  // minus what the cached copy already holds (a restore counts in full).
  uint64_t ProjectedNewKvBytes(const LiveSession& live, const Turn& turn) const;

  grpc::Status GenerateImpl(grpc::ServerContext* context, const v1::GenerateRequest* request,
                            grpc::ServerWriter<v1::GenerateResponse>* writer);

  const ServiceDeps deps_;
  const ServiceConfig& config_;
  std::string replica_name_;
  const uint64_t kv_bytes_per_token_;
  planner::ModelSpec served_spec_;
  LruByteCache<LiveSession> cache_;
  std::atomic<bool> draining_{false};
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_INFERENCE_SERVICE_H_
