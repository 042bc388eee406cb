// Configuration of a kvfold-inference replica: a plain struct filled from flags
// (service_main.cc), validated once at start-up, immutable afterwards.
#ifndef KVFOLD_INFERENCE_SVC_SERVICE_SERVICE_CONFIG_H_
#define KVFOLD_INFERENCE_SVC_SERVICE_SERVICE_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/kv_mode.h"
#include "inference_svc/engine/kv_cache.h"
#include "kvfold/v1/common.pb.h"

namespace kvfold::service {

struct ServiceConfig {
  // Model directory (HF safetensors) or llama2.c checkpoint. Required.
  std::string model_path;
  // Tokenizer file; empty = found next to the model.
  std::string tokenizer_path;
  // Projector directory (projector.json + projector.safetensors); empty = memory modes
  // unavailable (CreateSession with a memory mode is FAILED_PRECONDITION).
  std::string projector_path;
  // host:port of kvfold-memory. Required.
  std::string memory_store;
  // PEM CA for TLS to the store; empty = plaintext.
  std::string memory_store_tls_ca;
  // PEM client certificate and key presented to a store that requires mTLS (both or
  // neither; they need memory_store_tls_ca).
  std::string memory_store_tls_cert;
  std::string memory_store_tls_key;
  // Token sent to the store when the caller sent none (auth off here, on at the store).
  // Read from a file or the environment (service_main.cc), never from the command line.
  std::string store_token;
  // Listen address. Default: 127.0.0.1:7071. Port 0 picks a free port.
  std::string listen = "127.0.0.1:7071";
  // Backend name for the engine's factory: "cpu" (always), "cuda" (when built).
  std::string backend = "cpu";
  // Compute threads; 0 = the CPUs this process may use (cgroup CPU quota, common/cpus.h).
  int threads = 0;
  // KV pool the admission policy measures against. Default: 1 GiB.
  uint64_t kv_pool_bytes = 1ull << 30;
  // Back the whole KV pool's memory at start-up, on a background thread, and report
  // NOT_SERVING until it is done (docs/service.md "KV pool populated at start-up"), so
  // that the first sessions of a new replica do not stall on page faults of fresh memory.
  // Calls are served meanwhile. Default: on.
  bool kv_populate = true;
  // KV cache element type (--kv-dtype f32|f16|int8, engine::ParseKvDType). Default: f32.
  core::DType kv_dtype = core::DType::kF32;
  // Byte budget of the local session cache (derived KV of idle sessions). Default 512 MiB.
  uint64_t session_cache_bytes = 512ull << 20;
  // Defaults for CreateSession fields left unset.
  core::KvMode default_mode = core::KvMode::kMemory;
  uint32_t default_window = 0;  // 0 = the projector's window_size (memory) or 1024
  uint32_t default_sink = 4;
  // TLS for the listening port (both or neither); client CA turns on mTLS.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // Bearer tokens of callers (token -> tenant), reloaded on SIGHUP and when the file
  // changes. Required unless insecure_no_auth.
  std::string tokens_file;
  // Serve without authenticating callers (development only): every caller is the tenant
  // "default" here, and callers' tokens are still forwarded to the store. Default: false.
  bool insecure_no_auth = false;
  // Prometheus text metrics (GET /metrics) on this "HOST:PORT" (numeric host:
  // "0.0.0.0:9091" in a pod, "127.0.0.1:0" in tests). Empty = off. Default: off.
  std::string metrics_listen;
  // Structured request logs (one JSON line per call on stderr): the lowest level written
  // ("debug", "info", "warn", "error", "off") and whether prompt text may appear in them.
  // Default: info, no prompts.
  std::string log_level = "info";
  bool log_prompts = false;
  // OpenAI-compatible HTTP API (docs/http-api.md) on the listen host at this port; 0 picks
  // a free port, -1 = off. Default: off.
  int http_port = -1;
  // Open HTTP connections at most (one more is answered 503 and closed); 0 = half the
  // process's descriptor limit, within [16, 16384] (http::DefaultMaxConnections).
  int http_max_connections = 0;
  // Chat template family (llama3, llama31, chatml, llama2, mistral, gemma, plain); empty = detected
  // from the model's tokenizer_config.json (docs/tokenizers.md).
  std::string chat_template;
  // Name reported in Usage.replica; empty = the listen address.
  std::string replica_name;
  // Caps. A prompt longer than max_prompt_tokens is INVALID_ARGUMENT; max_new_tokens
  // above the cap is INVALID_ARGUMENT; 0 in a request means default_max_new_tokens.
  uint32_t max_prompt_tokens = 65536;
  uint32_t max_new_tokens_cap = 4096;
  uint32_t default_max_new_tokens = 128;
  // Scheduler: run all active sessions' decode steps in one batched forward (on), or one
  // session per forward (off: the baseline the benchmark compares against).
  bool batching = true;
  // Prompt tokens prefilled per scheduler step for one session, so long prompts interleave
  // with running decodes.
  uint32_t prefill_chunk_tokens = 256;
  // While other sessions decode, prompt work may take at most this many times their decode
  // time (a long prompt in pieces of bounded work, docs/service.md "The scheduler"), so it
  // slows their tokens by at most about (1 + prefill_stall)x of engine time. 0 = fixed
  // prefill_chunk_tokens chunks.
  // Default: 1.
  double prefill_stall = 1.0;
  // Maximum sessions decoding at once; more wait in the queue.
  uint32_t max_active_sessions = 64;
  // Finished ephemeral sessions kept so that a later ephemeral prompt starting with what
  // one fed copies it instead of feeding it again (docs/service.md "Prefix cache");
  // 0 = off. Default: 16.
  uint32_t prefix_cache_entries = 16;
  // Threads gRPC may run calls on. A call holds one while it runs, a Generate call also
  // while its turn waits in the queue; a call beyond them is RESOURCE_EXHAUSTED at once, so
  // a flood of calls cannot take the process's last threads (a container's pid limit).
  // Default: 512.
  int max_call_threads = 512;
  // SIGTERM: health turns NOT_SERVING at once, calls are still accepted and served for
  // drain_delay_s (so load balancers see the change and stop routing here), then new calls
  // are refused and turns in flight get drain_timeout_s to finish and checkpoint.
  // Defaults: 0 s and 30 s. docs/observability.md, k8s/README.md.
  double drain_delay_s = 0;
  double drain_timeout_s = 30;

  // InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

}  // namespace kvfold::service

#endif  // KVFOLD_INFERENCE_SVC_SERVICE_SERVICE_CONFIG_H_
