// InferenceServiceImpl: shared helpers and the unary RPCs. Generate: service_generate.cc.
#include "inference_svc/service/inference_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/sha256.h"
#include "inference_svc/planner/planner_proto.h"
#include "inference_svc/service/session_codec.h"
#include "inference_svc/service/validation.h"

namespace kvfold::service {
namespace {

planner::ModelSpec SpecOf(const model::ModelConfig& c) {
  planner::ModelSpec s;
  s.name = c.architecture;
  s.hidden_size = static_cast<uint64_t>(c.hidden_size);
  s.num_layers = static_cast<uint64_t>(c.num_layers);
  s.num_heads = static_cast<uint64_t>(c.num_heads);
  s.num_kv_heads = static_cast<uint64_t>(c.num_kv_heads);
  s.head_dim = static_cast<uint64_t>(c.head_dim);
  s.vocab_size = static_cast<uint64_t>(c.vocab_size);
  s.intermediate_size = static_cast<uint64_t>(c.intermediate_size);
  s.sliding_window = static_cast<uint64_t>(c.sliding_window);
  s.max_position_embeddings = static_cast<uint64_t>(c.max_position_embeddings);
  s.tie_word_embeddings = c.tie_word_embeddings;
  s.qkv_bias = c.qkv_bias;
  s.source = "served model";
  return s;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

InferenceServiceImpl::InferenceServiceImpl(const ServiceDeps& deps)
    : deps_(deps),
      config_(*deps.config),
      replica_name_(deps.config->replica_name.empty() ? deps.config->listen
                                                      : deps.config->replica_name),
      // The KV pool holds F32 K and V for every layer (kernels/backend.h).
      kv_bytes_per_token_(2ull * deps.engine->config().num_layers *
                          deps.engine->config().kv_dim() * sizeof(float)),
      served_spec_(SpecOf(deps.engine->config())),
      cache_(deps.config->session_cache_bytes) {}

absl::StatusOr<InferenceServiceImpl::Caller> InferenceServiceImpl::Authenticate(
    const grpc::ServerContext& context) const {
  if (draining_.load()) return absl::UnavailableError("the replica is draining (shutting down)");
  auto tenant = AuthenticateTenant(deps_.tokens, context);
  if (!tenant.ok()) return tenant.status();
  Caller caller;
  caller.tenant = *tenant;
  caller.store_token = config_.store_token;
  const auto& md = context.client_metadata();
  if (auto it = md.find("authorization"); it != md.end()) {
    std::string value(it->second.data(), it->second.size());
    if (value.rfind("Bearer ", 0) == 0 && value.size() > 7) caller.store_token = value.substr(7);
  }
  return caller;
}

std::string InferenceServiceImpl::CacheKey(const Caller& caller,
                                           const std::string& session_id) const {
  // The store scopes every call by the credential the replica forwards, whatever tenant
  // this replica resolved locally (with auth off here, every caller is the local default
  // tenant). Cached state is derived from the store's data for that credential, so the
  // key carries a digest of it: a copy is only ever reused by a caller the store sees as
  // the same identity (docs/service.md, "Tenants").
  return absl::StrCat(caller.tenant, "\n", Sha256Hex(caller.store_token), "\n", session_id);
}

absl::StatusOr<v1::SessionConfig> InferenceServiceImpl::ResolveConfig(
    const v1::SessionConfig& requested) const {
  v1::SessionConfig c = requested;
  if (c.mode() == v1::KV_MODE_UNSPECIFIED) c.set_mode(config_.default_mode);
  if (!v1::KvMode_IsValid(c.mode())) return absl::InvalidArgumentError("unknown mode");
  if (IsMemoryMode(c.mode())) {
    if (deps_.projector == nullptr) {
      return absl::FailedPreconditionError(
          "memory modes need a projector: start the replica with --projector");
    }
    const int w = c.mode() == v1::KV_MODE_MEMORY_ONLY ? 0 : deps_.projector->config().window_size;
    if (c.window_size() != 0 && static_cast<int>(c.window_size()) != w) {
      return absl::InvalidArgumentError(absl::StrCat(
          "window_size ", c.window_size(), " differs from the projector's window ", w,
          " (memory modes take W and C from the projector)"));
    }
    c.set_window_size(static_cast<uint32_t>(w));
    c.set_sink_tokens(0);
    return c;
  }
  if (c.window_size() == 0) c.set_window_size(config_.default_window ? config_.default_window : 1024);
  if (c.mode() == v1::KV_MODE_SINK) {
    if (c.sink_tokens() == 0) c.set_sink_tokens(config_.default_sink);
  } else {
    c.set_sink_tokens(0);
  }
  if (c.mode() == v1::KV_MODE_FULL) c.set_window_size(0);
  if (c.window_size() > (1u << 24)) return absl::InvalidArgumentError("window_size too large");
  return c;
}

engine::SamplingParams InferenceServiceImpl::ToEngineSampling(const v1::SamplingParams& p) const {
  engine::SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p() == 0 ? 1.0f : p.top_p();
  s.seed = p.seed();
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  s.max_new_tokens = p.max_new_tokens() > 0 ? p.max_new_tokens()
                                            : static_cast<int>(config_.default_max_new_tokens);
  return s;
}

absl::StatusOr<std::shared_ptr<LiveSession>> InferenceServiceImpl::LiveFromBlock(
    const Caller& caller, const std::string& session_id, const memory::MemoryBlock& block,
    uint64_t version, engine::SessionState* restore_state) const {
  const v1::MemoryBlockHeader& h = block.header;
  memory::BlockExpectations expected;
  expected.model_fingerprint = deps_.engine->fingerprint();
  expected.hidden_size = deps_.engine->config().hidden_size;
  expected.vocab_size = deps_.engine->config().vocab_size;
  if (IsMemoryMode(h.kv_mode())) {
    if (deps_.projector == nullptr) {
      return absl::FailedPreconditionError(
          "the session is in a memory mode but this replica runs without a projector");
    }
    expected.projector_fingerprint = deps_.projector_fingerprint;
    expected.projector_mem_slots = deps_.projector->config().mem_slots;
  }
  auto state = DecodeSessionBlock(block, expected);
  if (!state.ok()) return state.status();
  auto live = std::make_shared<LiveSession>();
  live->tenant = caller.tenant;
  live->session_id = session_id;
  live->config.set_mode(h.kv_mode());
  live->config.set_window_size(h.window_size());
  live->config.set_sink_tokens(h.sink_tokens());
  live->sampling = h.sampler_state().params();
  for (int i = 0; i < 4 && i < h.sampler_state().rng_state_size(); ++i) {
    live->rng_state[i] = h.sampler_state().rng_state(i);
  }
  live->created_unix_ms = h.created_unix_ms();
  live->version.store(version);
  live->total_tokens.store(static_cast<int64_t>(h.total_tokens()));
  live->tokens_folded.store(static_cast<int64_t>(h.tokens_folded()));
  *restore_state = std::move(*state);
  return live;
}

absl::StatusOr<memory::MemoryBlock> InferenceServiceImpl::BlockFromTurn(const LiveSession& live,
                                                                        const Turn& turn) const {
  v1::SamplerState sampler;
  *sampler.mutable_params() = live.sampling;
  for (uint64_t w : turn.final_rng_state) sampler.add_rng_state(w);
  return EncodeSessionBlock(turn.final_state, sampler, deps_.engine->fingerprint(),
                            deps_.projector_fingerprint, deps_.engine->config().hidden_size);
}

absl::Status InferenceServiceImpl::RunToCompletion(const std::shared_ptr<Turn>& turn) const {
  deps_.scheduler->Submit(turn);
  std::vector<TurnEvent> events;
  while (true) {
    events.clear();
    turn->events.PopAll(std::chrono::milliseconds(100), &events);
    for (const TurnEvent& e : events) {
      if (e.kind == TurnEvent::Kind::kError) return e.status;
      if (e.kind == TurnEvent::Kind::kDone) return absl::OkStatus();
    }
  }
}

void InferenceServiceImpl::CacheCommitted(const std::string& key,
                                          std::shared_ptr<LiveSession> live) {
  const size_t bytes = live->kv_bytes_resident.load() + 1;
  cache_.Put(key, std::move(live), bytes);
}

grpc::Status InferenceServiceImpl::CreateSession(grpc::ServerContext* context,
                                                 const v1::CreateSessionRequest* request,
                                                 v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const std::string session_id =
      request->session_id().empty() ? NewSessionId() : request->session_id();
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return ToGrpcStatus(s);
  auto resolved = ResolveConfig(request->config());
  if (!resolved.ok()) return ToGrpcStatus(resolved.status());
  if (absl::Status s = ValidateSampling(request->sampling(), deps_.engine->config().vocab_size,
                                        static_cast<int>(config_.max_new_tokens_cap));
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  std::vector<int32_t> prompt;
  if (!request->system_prompt().empty()) {
    if (deps_.tokenizer == nullptr) {
      return ToGrpcStatus(absl::FailedPreconditionError("this replica has no tokenizer"));
    }
    auto ids = deps_.tokenizer->Encode(request->system_prompt(), /*add_bos=*/true);
    if (!ids.ok()) return ToGrpcStatus(ids.status());
    if (ids->size() > config_.max_prompt_tokens) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "system prompt is ", ids->size(), " tokens (max ", config_.max_prompt_tokens, ")")));
    }
    prompt = std::move(*ids);
  }
  // Fail fast on an existing id (the create's compare-and-set would reject it anyway).
  auto existing = deps_.store->GetSessionInfo(caller->store_token, session_id);
  if (existing.ok()) {
    return ToGrpcStatus(absl::AlreadyExistsError(absl::StrCat("session ", session_id, " exists")));
  }
  if (existing.status().code() != absl::StatusCode::kNotFound) {
    return ToGrpcStatus(existing.status());
  }
  auto live = std::make_shared<LiveSession>();
  live->tenant = caller->tenant;
  live->session_id = session_id;
  live->config = *resolved;
  live->sampling = request->sampling();
  live->rng_state = engine::Rng(request->sampling().seed()).state();
  live->created_unix_ms = NowUnixMs();
  auto turn = std::make_shared<Turn>();
  turn->live = live;
  turn->prompt_ids = std::move(prompt);
  turn->sampling = ToEngineSampling(request->sampling());
  turn->sampling.max_new_tokens = 0;
  live->busy.store(true);
  absl::Status s = RunToCompletion(turn);
  if (s.ok()) {
    auto block = BlockFromTurn(*live, *turn);
    s = block.status();
    if (block.ok()) {
      auto version = deps_.store->PutBlock(caller->store_token, session_id, 0, *block);
      if (version.ok()) {
        live->version.store(*version);
      } else if (version.status().code() == absl::StatusCode::kAborted) {
        s = absl::AlreadyExistsError(absl::StrCat("session ", session_id, " exists"));
      } else {
        s = version.status();
      }
    }
  }
  live->busy.store(false);
  if (!s.ok()) return ToGrpcStatus(s);
  CacheCommitted(CacheKey(*caller, session_id), live);
  return ToGrpcStatus(DescribeSession(*caller, session_id, response));
}

absl::Status InferenceServiceImpl::DescribeSession(const Caller& caller,
                                                   const std::string& session_id,
                                                   v1::Session* out) {
  auto info = deps_.store->GetSessionInfo(caller.store_token, session_id);
  if (!info.ok()) return info.status();
  out->Clear();
  out->set_session_id(session_id);
  out->set_head_version(info->head_version());
  out->set_created_unix_ms(info->created_unix_ms());
  out->set_updated_unix_ms(info->updated_unix_ms());
  out->set_model_fingerprint(deps_.engine->fingerprint());
  auto block = deps_.store->GetBlock(caller.store_token, session_id, info->head_version(), nullptr);
  if (!block.ok()) return block.status();
  const v1::MemoryBlockHeader& h = block->header;
  out->mutable_config()->set_mode(h.kv_mode());
  out->mutable_config()->set_window_size(h.window_size());
  out->mutable_config()->set_sink_tokens(h.sink_tokens());
  *out->mutable_sampling() = h.sampler_state().params();
  out->set_total_tokens(h.total_tokens());
  out->set_tokens_folded(h.tokens_folded());
  const uint64_t resident = static_cast<uint64_t>(h.window_token_ids_size()) +
                            h.sink_token_ids_size() + h.mem_slots();
  out->set_resident_tokens(resident);
  out->set_kv_bytes_resident(resident * kv_bytes_per_token_);
  out->set_memory_block_bytes(h.payload_size());
  out->set_model_fingerprint(h.model_fingerprint());
  out->set_projector_fingerprint(h.projector_fingerprint());
  return absl::OkStatus();
}

grpc::Status InferenceServiceImpl::GetSession(grpc::ServerContext* context,
                                              const v1::GetSessionRequest* request,
                                              v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) return ToGrpcStatus(s);
  return ToGrpcStatus(DescribeSession(*caller, request->session_id(), response));
}

grpc::Status InferenceServiceImpl::ListSessions(grpc::ServerContext* context,
                                                const v1::ListSessionsRequest* request,
                                                v1::ListSessionsResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (request->page_size() > 1000) {
    return ToGrpcStatus(absl::InvalidArgumentError("page_size must be <= 1000"));
  }
  auto page = deps_.store->ListSessions(caller->store_token, request->page_size(),
                                        request->page_token());
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (const v1::SessionInfo& info : page->sessions()) {
    v1::Session* s = response->add_sessions();
    s->set_session_id(info.session_id());
    s->set_head_version(info.head_version());
    s->set_total_tokens(info.total_tokens());
    s->set_created_unix_ms(info.created_unix_ms());
    s->set_updated_unix_ms(info.updated_unix_ms());
  }
  response->set_next_page_token(page->next_page_token());
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::DeleteSession(grpc::ServerContext* context,
                                                 const v1::DeleteSessionRequest* request,
                                                 v1::DeleteSessionResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) return ToGrpcStatus(s);
  auto deleted = deps_.store->Delete(caller->store_token, request->session_id());
  cache_.Erase(CacheKey(*caller, request->session_id()));
  if (!deleted.ok()) return ToGrpcStatus(deleted.status());
  response->set_versions_deleted(*deleted);
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::ForkSession(grpc::ServerContext* context,
                                               const v1::ForkSessionRequest* request,
                                               v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->source_session_id()); !s.ok()) {
    return ToGrpcStatus(s);
  }
  const std::string new_id =
      request->new_session_id().empty() ? NewSessionId() : request->new_session_id();
  if (absl::Status s = ValidateSessionId(new_id); !s.ok()) return ToGrpcStatus(s);
  auto forked = deps_.store->Fork(caller->store_token, request->source_session_id(),
                                  request->version(), new_id);
  if (!forked.ok()) return ToGrpcStatus(forked.status());
  return ToGrpcStatus(DescribeSession(*caller, new_id, response));
}

grpc::Status InferenceServiceImpl::RollbackSession(grpc::ServerContext* context,
                                                   const v1::RollbackSessionRequest* request,
                                                   v1::Session* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = ValidateSessionId(request->session_id()); !s.ok()) return ToGrpcStatus(s);
  if (request->version() == 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("version must be >= 1"));
  }
  auto info = deps_.store->SetHead(caller->store_token, request->session_id(), request->version());
  // The cached copy is at another version now; the next Generate restores the new head.
  cache_.Erase(CacheKey(*caller, request->session_id()));
  if (!info.ok()) return ToGrpcStatus(info.status());
  return ToGrpcStatus(DescribeSession(*caller, request->session_id(), response));
}

grpc::Status InferenceServiceImpl::EstimateKvCache(grpc::ServerContext* context,
                                                   const v1::EstimateKvCacheRequest* request,
                                                   v1::EstimateKvCacheResponse* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  auto estimate = planner::EstimateKvCache(*request, &served_spec_);
  if (!estimate.ok()) return ToGrpcStatus(estimate.status());
  *response = std::move(*estimate);
  return grpc::Status::OK;
}

grpc::Status InferenceServiceImpl::GetModelInfo(grpc::ServerContext* context,
                                                const v1::GetModelInfoRequest* request,
                                                v1::ModelInfo* response) {
  auto caller = Authenticate(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const model::ModelConfig& c = deps_.engine->config();
  response->set_name(config_.model_path);
  response->set_architecture(c.architecture);
  response->set_model_fingerprint(deps_.engine->fingerprint());
  response->set_hidden_size(c.hidden_size);
  response->set_num_layers(c.num_layers);
  response->set_num_heads(c.num_heads);
  response->set_num_kv_heads(c.num_kv_heads);
  response->set_head_dim(c.head_dim);
  response->set_vocab_size(c.vocab_size);
  response->set_max_position_embeddings(c.max_position_embeddings);
  if (deps_.projector != nullptr) {
    response->set_projector_fingerprint(deps_.projector_fingerprint);
    response->set_mem_slots(deps_.projector->config().mem_slots);
    response->set_window_size(deps_.projector->config().window_size);
    response->set_chunk_size(deps_.projector->config().chunk_size);
  } else {
    response->set_window_size(config_.default_window ? config_.default_window : 1024);
  }
  response->set_backend(deps_.engine->backend().Name());
  response->set_kv_bytes_per_token(kv_bytes_per_token_);
  response->set_default_mode(config_.default_mode);
  return grpc::Status::OK;
}

}  // namespace kvfold::service
