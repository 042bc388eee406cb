#include "inference_svc/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/grpc_decode_errors.h"
#include "common/install_paths.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/service/http_turn_port.h"

namespace kvfold::service {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServiceConfig& config) {
  if (config.tls_cert.empty()) return grpc::InsecureServerCredentials();
  auto cert = ReadFileToString(config.tls_cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadFileToString(config.tls_key);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl(
      config.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!config.tls_client_ca.empty()) {
    auto ca = ReadFileToString(config.tls_client_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Start(
    const ServiceConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  auto server = std::unique_ptr<InferenceServer>(new InferenceServer());
  server->config_ = config;
  const ServiceConfig& c = server->config_;

  auto backend = kernels::CreateBackend(c.backend, c.threads);
  if (!backend.ok()) return backend.status();
  server->backend_ = std::move(*backend);
  auto model = model::LoadModel(c.model_path);
  if (!model.ok()) return model.status();
  engine::EngineOptions engine_options;
  engine_options.kv_pool_bytes = c.kv_pool_bytes;
  engine_options.kv_dtype = c.kv_dtype;
  auto engine = engine::Engine::Create(*model, server->backend_.get(), engine_options);
  if (!engine.ok()) return engine.status();
  server->engine_ = std::move(*engine);

  std::string tokenizer_path = c.tokenizer_path;
  if (tokenizer_path.empty()) {
    auto found = Tokenizer::FindNextToModel(c.model_path);
    if (found.ok()) tokenizer_path = *found;
  }
  if (!tokenizer_path.empty()) {
    auto tokenizer = Tokenizer::Load(tokenizer_path);
    if (!tokenizer.ok()) return tokenizer.status();
    server->tokenizer_ = std::move(*tokenizer);
    // An unknown template is a start-up error: a replica must not serve chats it would
    // format wrongly (--chat-template overrides).
    auto chat = ChatTemplate::ForModel(c.model_path, c.chat_template, server->tokenizer_.get());
    if (!chat.ok()) return chat.status();
    server->chat_template_ = std::make_unique<ChatTemplate>(std::move(*chat));
  } else {
    std::fprintf(stderr, "kvfold-inference: no tokenizer next to %s: token-id prompts only\n",
                 c.model_path.c_str());
  }
  if (c.projector_path == kAutoProjector) {
    // The installed projector made for this model, if any (share/kvfold/projectors).
    auto found = FindInstalledProjector(server->engine_->fingerprint());
    if (found.ok()) {
      server->config_.projector_path = *found;
    } else {
      std::fprintf(stderr, "kvfold-inference: --projector=auto: %s\n",
                   std::string(found.status().message()).c_str());
      server->config_.projector_path.clear();
    }
  }
  if (!c.projector_path.empty()) {
    auto projector = memory::Projector::LoadForModel(c.projector_path, server->engine_->fingerprint(),
                                                     server->engine_->config().hidden_size);
    if (!projector.ok()) return projector.status();
    if (absl::Status s = (*projector)->UseEngineBackend(&server->engine_->backend()); !s.ok()) {
      return s;
    }
    server->projector_ = std::move(*projector);
  } else if (core::IsMemoryMode(c.default_mode)) {
    server->config_.default_mode = core::KvMode::kFull;
    std::fprintf(stderr, "kvfold-inference: no --projector: default mode is full\n");
  }
  if (!c.tokens_file.empty()) {
    auto tokens = TokenTable::LoadFile(c.tokens_file);
    if (!tokens.ok()) return tokens.status();
    server->tokens_ = std::make_unique<TokenTable>(std::move(*tokens));
    server->tokens_->WatchFile();
  }
  StoreGatewayOptions store_options;
  store_options.address = c.memory_store;
  store_options.tls_ca = c.memory_store_tls_ca;
  store_options.tls_cert = c.memory_store_tls_cert;
  store_options.tls_key = c.memory_store_tls_key;
  auto store = StoreGateway::Create(store_options);
  if (!store.ok()) return store.status();
  server->store_ = std::move(*store);

  server->store_sessions_ = std::make_unique<StoreSessions>(
      server->store_.get(), server->engine_.get(), server->projector_.get());
  runtime::RuntimeOptions runtime_options;
  runtime_options.default_mode = server->config_.default_mode;
  runtime_options.default_window = static_cast<int>(c.default_window);
  runtime_options.default_sink = static_cast<int>(c.default_sink);
  runtime_options.default_max_new_tokens = static_cast<int>(c.default_max_new_tokens);
  runtime_options.max_new_tokens_cap = static_cast<int>(c.max_new_tokens_cap);
  runtime_options.max_prompt_tokens = static_cast<int>(c.max_prompt_tokens);
  runtime_options.session_cache_bytes = c.session_cache_bytes;
  runtime_options.scheduler.batching = c.batching;
  runtime_options.scheduler.prefill_chunk_tokens = static_cast<int>(c.prefill_chunk_tokens);
  runtime_options.scheduler.max_active_sessions = static_cast<int>(c.max_active_sessions);
  runtime_options.scheduler.prefix_cache_entries = static_cast<int>(c.prefix_cache_entries);
  runtime_options.scheduler.prefill_stall = c.prefill_stall;
  runtime::Runtime::Deps runtime_deps;
  runtime_deps.engine = server->engine_.get();
  runtime_deps.tokenizer = server->tokenizer_.get();
  runtime_deps.chat_template = server->chat_template_.get();
  runtime_deps.projector = server->projector_.get();
  runtime_deps.store = server->store_sessions_.get();
  server->runtime_ = std::make_unique<runtime::Runtime>(runtime_deps, runtime_options);

  auto level = logging::ParseLevel(c.log_level);
  if (!level.ok()) return level.status();
  logging::RequestLogOptions log_options;
  log_options.min_level = *level;
  log_options.log_prompts = c.log_prompts;
  server->logger_ = std::make_unique<logging::RequestLogger>(log_options);
  server->inference_metrics_ = std::make_unique<InferenceMetrics>(&server->registry_);
  server->request_log_ = std::make_unique<logging::GrpcRequestLog>(
      server->logger_.get(), [m = server->inference_metrics_.get()](const logging::RequestRecord& r) {
        // gRPC's own services (health probes, reflection) are not requests to count.
        if (r.method.rfind("/grpc.", 0) == 0) return;
        m->RequestDone(Front::kGrpc, r.code, r.duration_ms / 1000.0);
      });

  ServiceDeps deps;
  deps.config = &server->config_;
  deps.engine = server->engine_.get();
  deps.tokenizer = server->tokenizer_.get();
  deps.chat_template = server->chat_template_.get();
  deps.projector = server->projector_.get();
  deps.projector_fingerprint = server->projector_ ? server->projector_->fingerprint() : "";
  deps.runtime = server->runtime_.get();
  deps.store = server->store_.get();
  deps.tokens = server->tokens_.get();
  deps.metrics = server->inference_metrics_.get();
  deps.request_log = server->request_log_.get();
  server->service_ = std::make_unique<InferenceServiceImpl>(deps);

  auto credentials = ServerCredentials(c);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(c.listen, *credentials, &bound_port);
  builder.RegisterService(server->service_.get());
  // The largest request a replica can accept is a prompt at the limit (runtime.h,
  // kMaxBytesPerPromptToken); with one request buffered per call thread, a larger message
  // bound would only let a flood of huge requests take the replica's memory first.
  const int64_t max_request_bytes = std::clamp<int64_t>(
      static_cast<int64_t>(runtime::kMaxBytesPerPromptToken) * c.max_prompt_tokens + (1 << 20),
      4 << 20, std::numeric_limits<int>::max());
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_request_bytes));
  builder.SetMaxSendMessageSize(64 << 20);
  // Never share the port (gRPC sets SO_REUSEPORT by default): a second replica started on
  // a port in use must fail, not take half of the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The sync API holds a thread per call; without a limit a flood of calls takes every
  // thread the process may have, and the next thread anything else starts fails.
  grpc::ResourceQuota quota("kvfold-inference");
  quota.SetMaxThreads(c.max_call_threads);
  builder.SetResourceQuota(quota);
  // The decode-error interceptor first: it rewrites a status that the request log (next)
  // then records as the client sees it.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MakeDecodeErrorInterceptorFactory());
  interceptors.push_back(server->request_log_->MakeFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", c.listen,
                     " (address in use by another process, or not a local address)"));
  }
  const std::string host = c.listen.substr(0, c.listen.rfind(':'));
  server->address_ = absl::StrCat(host, ":", bound_port);
  if (c.replica_name.empty()) server->service_->set_replica_name(server->address_);
  auto* health = server->server_->GetHealthCheckService();
  // Probes may ask for "" (the server) or for the service by name; SetServingStatus(bool)
  // below then moves both.
  health->SetServingStatus(v1::InferenceService::service_full_name(), false);
  health->SetServingStatus(false);

  server->RegisterReplicaMetrics();
  if (!c.metrics_listen.empty()) {
    InferenceServer* raw = server.get();
    auto metrics = metrics::MetricsHttpServer::Start(
        c.metrics_listen, [raw] { return raw->registry_.Render(); },
        [raw] { return raw->Readiness().ok(); });
    if (!metrics.ok()) return metrics.status();
    server->metrics_http_ = std::move(*metrics);
  }
  if (c.http_port >= 0) {
    if (server->chat_template_ == nullptr) {
      return absl::FailedPreconditionError("--http-port needs a tokenizer next to the model");
    }
    InferenceServer* raw = server.get();
    // The model's name: its directory, or its file without the extension.
    std::filesystem::path model_path(c.model_path);
    if (!std::filesystem::is_directory(model_path)) model_path = model_path.stem();
    const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    RuntimeTurnPortDeps port;
    port.runtime = server->runtime_.get();
    port.store = server->store_.get();
    port.tokens = server->tokens_.get();
    port.store_token = c.store_token;
    port.model = http::ModelCard{model_path.filename().string(), now_s, c.max_prompt_tokens};
    port.kv_bytes_per_token = server->engine_->pool().bytes_per_token();
    port.replica = c.replica_name.empty() ? server->address_ : c.replica_name;
    port.ready = [raw] { return raw->Readiness(); };
    port.draining = [raw] { return raw->stopping_.load(); };
    port.metrics = server->inference_metrics_.get();
    server->http_port_ = std::make_unique<RuntimeTurnPort>(std::move(port));
    http::OpenAiFrontOptions http_options;
    http_options.http.host = host;
    http_options.http.port = c.http_port;
    http_options.http.max_connections = static_cast<size_t>(c.http_max_connections);
    http_options.metrics_text = [raw] { return raw->registry_.Render(); };
    // The same log and metrics as gRPC calls; probes (health, scrapes) are not requests.
    http_options.record_prompts = c.log_prompts;
    http_options.on_request = [raw](const logging::RequestRecord& r) {
      raw->logger_->Write(r);
      if (!r.probe) {
        raw->inference_metrics_->RequestDone(Front::kHttp, r.code, r.duration_ms / 1000.0);
      }
    };
    auto front = http::OpenAiFront::Start(http_options, server->http_port_.get(),
                                          server->tokenizer_.get(), server->chat_template_.get());
    if (!front.ok()) return front.status();
    server->http_front_ = std::move(*front);
    // Read at scrape time; the front outlives the metrics port (Shutdown).
    const http::HttpServer* http_server = &server->http_front_->server();
    server->registry_.AddCallbackGauge(
        "kvfold_inference_http_open_connections", "Connections open on the HTTP API.",
        [http_server] { return static_cast<double>(http_server->open_connections()); });
    server->registry_.AddCallbackCounter(
        "kvfold_inference_http_refused_connections_total",
        "Connections answered 503 for the HTTP API's connection limit.",
        [http_server] { return static_cast<double>(http_server->refused_connections()); });
  }
  if (c.kv_populate) {
    server->populate_thread_ = std::thread([raw = server.get()] { raw->PopulateLoop(); });
  }
  server->health_thread_ = std::thread([raw = server.get()] { raw->HealthLoop(); });
  return server;
}

void InferenceServer::PopulateLoop() {
  // Normal priority: the replica is NOT_SERVING meanwhile, so little else runs, and at a
  // lower one (SCHED_IDLE) a busy host could starve the thread, so that Shutdown's join
  // would wait for a chunk indefinitely. A turn that needs a block past the backed mark
  // backs it itself (BlockPool::AllocateBlock); Shutdown stops the loop within a chunk.
  engine_->pool().PopulateAll(stopping_);
}

absl::Status InferenceServer::Readiness() const {
  if (stopping_.load()) return absl::UnavailableError("draining");
  if (!store_ok_.load()) return absl::UnavailableError("memory store unavailable");
  const engine::BlockPool& pool = engine_->pool();
  if (config_.kv_populate && pool.populated_blocks() < pool.num_blocks()) {
    return absl::UnavailableError(absl::StrCat("KV pool being populated (", pool.populated_blocks(),
                                               " of ", pool.num_blocks(), " blocks)"));
  }
  return absl::OkStatus();
}

void InferenceServer::HealthLoop() {
  // SERVING once the model is loaded (it is, by now), the store answers and (with
  // kv_populate) the KV pool is backed; the store is re-checked every second so the probe
  // follows its availability, the pool every 100 ms until it is backed.
  int tick = 0;
  while (!stopping_.load()) {
    if (tick++ % 10 == 0) store_ok_.store(store_->CheckHealth().ok());
    const bool ok = Readiness().ok();
    if (ok != serving_.load()) {
      serving_.store(ok);
      server_->GetHealthCheckService()->SetServingStatus(ok);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void InferenceServer::RegisterReplicaMetrics() {
  const runtime::Scheduler* sched = &runtime_->scheduler();
  inference_metrics_->SetGaugeSources(
      [sched] {
        // What admission measures: the reservations of admitted turns against the pool.
        const double pool = static_cast<double>(sched->kv_pool_bytes());
        return pool > 0 ? static_cast<double>(sched->kv_reserved_bytes()) / pool : 0.0;
      },
      [sched] { return static_cast<double>(sched->active_turns()); },
      [sched] { return static_cast<double>(sched->queued_turns()); });
  metrics::Registry& r = registry_;
  r.AddCallbackGauge("kvfold_kv_pool_bytes", "Size of the KV pool in bytes.",
                     [sched] { return static_cast<double>(sched->kv_pool_bytes()); });
  const engine::BlockPool* pool = &engine_->pool();
  r.AddCallbackGauge("kvfold_kv_populated_bytes",
                     "KV pool bytes whose memory is backed (all of it once populated at start-up).",
                     [pool] {
                       return static_cast<double>(pool->populated_blocks()) *
                              static_cast<double>(pool->bytes_per_block());
                     });
  r.AddCallbackGauge("kvfold_kv_used_bytes", "KV pool bytes held by sessions.",
                     [sched] { return static_cast<double>(sched->kv_used_bytes()); });
  r.AddCallbackGauge("kvfold_kv_reserved_bytes", "KV pool bytes reserved by admitted turns.",
                     [sched] { return static_cast<double>(sched->kv_reserved_bytes()); });
  r.AddCallbackCounter("kvfold_decode_steps_total", "Batched decode steps run.",
                       [sched] { return static_cast<double>(sched->decode_steps()); });
  r.AddCallbackCounter("kvfold_prompt_copies_total",
                       "Prompts a turn copied from another turn of its prompt instead of feeding "
                       "them (the choices of one HTTP request).",
                       [sched] { return static_cast<double>(sched->prompt_copies()); });
  r.AddCallbackCounter("kvfold_prefix_cache_hits_total",
                       "Ephemeral prompts that began with what a prefix cache entry fed.",
                       [sched] { return static_cast<double>(sched->prefix_cache_hits()); });
  r.AddCallbackCounter("kvfold_prefix_cache_tokens_total",
                       "Prompt tokens copied from the prefix cache instead of fed.",
                       [sched] { return static_cast<double>(sched->prefix_cache_tokens()); });
  r.AddCallbackCounter("kvfold_structured_tokens_total",
                       "Tokens picked under a structured output's mask (JSON, a schema, choices).",
                       [sched] { return static_cast<double>(sched->structured_tokens()); });
  r.AddCallbackCounter("kvfold_structured_mask_seconds_total",
                       "Time spent masking the vocabulary for structured output.",
                       [sched] { return sched->structured_mask_seconds(); });
  const runtime::Runtime* rt = runtime_.get();
  r.AddCallbackGauge("kvfold_session_cache_bytes", "Bytes of idle sessions in the local cache.",
                     [rt] { return static_cast<double>(rt->sessions().cached_bytes()); });
  r.AddCallbackGauge("kvfold_session_cache_entries", "Idle sessions in the local cache.",
                     [rt] { return static_cast<double>(rt->sessions().cached_sessions()); });
  r.AddCallbackGauge("kvfold_serving", "1 while health reports SERVING, else 0.",
                     [this] { return serving_.load() ? 1.0 : 0.0; });
}

void InferenceServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  if (health_thread_.joinable()) health_thread_.join();
  if (populate_thread_.joinable()) populate_thread_.join();
  if (server_ != nullptr) {
    // 1. NOT_SERVING first: readiness probes fail and the endpoint leaves the Services,
    // while calls that were already routed here keep being served for drain_delay_s.
    serving_.store(false);
    server_->GetHealthCheckService()->SetServingStatus(false);
    if (config_.drain_delay_s > 0) {
      std::this_thread::sleep_for(
          std::chrono::milliseconds(static_cast<int64_t>(config_.drain_delay_s * 1000)));
    }
    // 2. Refuse new calls; turns in flight finish and checkpoint.
    service_->StartDraining();
    // New calls are refused; handlers in flight finish their turns and checkpoint. Past
    // the drain deadline gRPC cancels them (their turns are then not committed).
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(config_.drain_timeout_s * 1000)));
  }
  // HTTP turns in flight get the same drain time, then are cancelled; the port returns
  // once their last events went to the front, whose connections close last.
  if (http_port_ != nullptr) {
    http_port_->Drain(absl::Milliseconds(static_cast<int64_t>(config_.drain_timeout_s * 1000)));
  }
  if (http_front_ != nullptr) http_front_->Stop();
  http_port_.reset();
  if (runtime_ != nullptr) runtime_->Stop();
  metrics_http_.reset();
  // After the metrics port: its scrapes read the stopped front's connection counts.
  http_front_.reset();
}

InferenceServer::~InferenceServer() {
  Shutdown();
  // Sessions cached by the runtime hold engine sessions whose deleter targets the
  // scheduler (already stopped: it deletes inline). Destroy in dependency order.
  server_.reset();
  service_.reset();
  runtime_.reset();
  store_sessions_.reset();
  engine_.reset();
}

}  // namespace kvfold::service
