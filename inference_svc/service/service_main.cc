// kvfold-inference: one inference replica. See docs/service.md.
//
//   kvfold-inference --model DIR --projector DIR --memory_store 127.0.0.1:7070
//       --listen 127.0.0.1:7071
// Prints "kvfold-inference listening on ADDR" once it accepts calls. SIGTERM/SIGINT: the
// drain of docs/observability.md (NOT_SERVING, serve for --drain-delay, refuse new calls,
// finish and checkpoint the turns in flight, exit 0). SIGHUP: reload the tokens
// file. Without --tokens_file it refuses to start unless --insecure_no_auth is given.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/session_block.h"
#include "inference_svc/service/server.h"

ABSL_FLAG(std::string, model, "", "model directory (HF safetensors) or llama2.c checkpoint");
ABSL_FLAG(std::string, tokenizer, "", "tokenizer file (default: found next to the model)");
ABSL_FLAG(std::string, projector, "", "projector directory; empty = no memory modes");
ABSL_FLAG(std::string, memory_store, "127.0.0.1:7070", "kvfold-memory address host:port");
ABSL_FLAG(std::string, memory_store_tls_ca, "", "PEM CA for TLS to the store (empty: plaintext)");
ABSL_FLAG(std::string, memory_store_tls_cert, "",
          "PEM client certificate for a store that requires mTLS (with --memory_store_tls_key)");
ABSL_FLAG(std::string, memory_store_tls_key, "", "PEM private key of --memory_store_tls_cert");
ABSL_FLAG(std::string, store_token_file, "",
          "file holding the bearer token for the store when a caller sent none (callers' "
          "tokens are forwarded); else $KVFOLD_STORE_TOKEN; never on the command line");
ABSL_FLAG(std::string, listen, "127.0.0.1:7071", "listen address (port 0 = any free port)");
ABSL_FLAG(std::string, backend, "cpu", "engine backend: cpu, cpu-ref, cuda[:N] (when built)");
ABSL_FLAG(int, threads, 0, "compute threads (0 = all cores)");
ABSL_FLAG(uint64_t, kv_pool_bytes, 1ull << 30, "KV pool bytes (admission measures against it)");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV cache element type: f32|int8 (KIVI int8 codes)");
ABSL_FLAG(uint64_t, session_cache_bytes, 512ull << 20, "local session cache budget (bytes)");
ABSL_FLAG(std::string, default_mode, "memory", "full|sliding|sink|memory|memory_only");
ABSL_FLAG(uint32_t, default_window, 0, "default window (0 = projector's W, or 1024)");
ABSL_FLAG(uint32_t, default_sink, 4, "default sink tokens (sink mode)");
ABSL_FLAG(std::string, tls_cert, "", "server certificate (PEM); with --tls_key enables TLS");
ABSL_FLAG(std::string, tls_key, "", "server private key (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "", "CA for client certificates: enables mTLS");
ABSL_FLAG(std::string, tokens_file, "",
          "bearer tokens file ('<token> <tenant>' lines), reloaded on SIGHUP and on change");
ABSL_FLAG(bool, insecure_no_auth, false,
          "serve without a tokens file: every caller is tenant 'default' (development only)");
ABSL_FLAG(std::string, metrics_listen, "",
          "serve /metrics, /readyz, /livez on HOST:PORT (numeric host, e.g. 0.0.0.0:9091; "
          "empty = off)");
ABSL_FLAG(std::string, log_level, "info", "request logs: debug|info|warn|error|off");
ABSL_FLAG(bool, log_prompts, false, "write prompt text into the request logs");
ABSL_FLAG(int, http_port, -1,
          "OpenAI-compatible HTTP API on the --listen host at this port (0 = any free port, "
          "-1 = off); see docs/http-api.md");
ABSL_FLAG(std::string, chat_template, "",
          "chat template: llama3|chatml|llama2|mistral|gemma|plain (default: detected)");
ABSL_FLAG(std::string, replica_name, "", "name reported in Usage.replica (default: address)");
ABSL_FLAG(uint32_t, max_prompt_tokens, 65536, "longest prompt accepted (tokens)");
ABSL_FLAG(uint32_t, max_new_tokens_cap, 4096, "largest max_new_tokens accepted");
ABSL_FLAG(uint32_t, default_max_new_tokens, 128, "max_new_tokens when a request sets 0");
ABSL_FLAG(bool, batching, true, "batch all sessions' decode steps into one forward");
ABSL_FLAG(uint32_t, prefill_chunk_tokens, 256, "prompt tokens per scheduler step (at most)");
ABSL_FLAG(double, prefill_stall, 2.0,
          "while others decode, prompt work may take at most this many times their decode "
          "time (0 = fixed --prefill_chunk_tokens chunks)");
ABSL_FLAG(uint32_t, max_active_sessions, 64, "turns running at once (more wait)");
ABSL_FLAG(double, drain_delay, 0,
          "SIGTERM: seconds to keep serving while NOT_SERVING (endpoint removal)");
ABSL_FLAG(double, drain_timeout_s, 30, "SIGTERM: seconds to let turns in flight finish");

namespace {

// The flag takes the engine's mode names ("full", ..., "memory_only"); one parser and one
// engine->proto mapping serve the CLI, the sessions and this flag.
absl::StatusOr<kvfold::v1::KvMode> ParseMode(const std::string& name) {
  absl::StatusOr<kvfold::engine::KvMode> mode = kvfold::engine::ParseKvMode(name);
  if (!mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--default_mode: ", mode.status().message()));
  }
  return kvfold::memory::ToProtoMode(*mode);
}

// The replica's own store token: from a file, else the environment. Secrets on the
// command line are visible to every user through ps and /proc.
absl::StatusOr<std::string> StoreToken(const std::string& file) {
  if (!file.empty()) return kvfold::ReadSecretFile(file);
  const char* env = std::getenv("KVFOLD_STORE_TOKEN");
  return std::string(env == nullptr ? "" : env);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kvfold-inference --model DIR --memory_store HOST:PORT [flags]");
  absl::ParseCommandLine(argc, argv);
  // Signals are taken by sigwait() below; every thread started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  kvfold::service::ServiceConfig c;
  c.model_path = absl::GetFlag(FLAGS_model);
  c.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  c.projector_path = absl::GetFlag(FLAGS_projector);
  c.memory_store = absl::GetFlag(FLAGS_memory_store);
  c.memory_store_tls_ca = absl::GetFlag(FLAGS_memory_store_tls_ca);
  c.memory_store_tls_cert = absl::GetFlag(FLAGS_memory_store_tls_cert);
  c.memory_store_tls_key = absl::GetFlag(FLAGS_memory_store_tls_key);
  auto store_token = StoreToken(absl::GetFlag(FLAGS_store_token_file));
  if (!store_token.ok()) {
    std::fprintf(stderr, "kvfold-inference: %s\n", store_token.status().ToString().c_str());
    return 2;
  }
  c.store_token = *std::move(store_token);
  c.listen = absl::GetFlag(FLAGS_listen);
  c.backend = absl::GetFlag(FLAGS_backend);
  c.threads = absl::GetFlag(FLAGS_threads);
  c.kv_pool_bytes = absl::GetFlag(FLAGS_kv_pool_bytes);
  c.session_cache_bytes = absl::GetFlag(FLAGS_session_cache_bytes);
  auto kv_dtype = kvfold::engine::ParseKvDType(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv_dtype.ok()) {
    std::fprintf(stderr, "kvfold-inference: --kv_dtype: %s\n",
                 std::string(kv_dtype.status().message()).c_str());
    return 2;
  }
  c.kv_dtype = *kv_dtype;
  auto mode = ParseMode(absl::GetFlag(FLAGS_default_mode));
  if (!mode.ok()) {
    std::fprintf(stderr, "kvfold-inference: %s\n", mode.status().ToString().c_str());
    return 2;
  }
  c.default_mode = *mode;
  c.default_window = absl::GetFlag(FLAGS_default_window);
  c.default_sink = absl::GetFlag(FLAGS_default_sink);
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  c.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  c.insecure_no_auth = absl::GetFlag(FLAGS_insecure_no_auth);
  c.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  c.log_level = absl::GetFlag(FLAGS_log_level);
  c.log_prompts = absl::GetFlag(FLAGS_log_prompts);
  c.http_port = absl::GetFlag(FLAGS_http_port);
  c.chat_template = absl::GetFlag(FLAGS_chat_template);
  c.replica_name = absl::GetFlag(FLAGS_replica_name);
  c.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  c.max_new_tokens_cap = absl::GetFlag(FLAGS_max_new_tokens_cap);
  c.default_max_new_tokens = absl::GetFlag(FLAGS_default_max_new_tokens);
  c.batching = absl::GetFlag(FLAGS_batching);
  c.prefill_chunk_tokens = absl::GetFlag(FLAGS_prefill_chunk_tokens);
  c.prefill_stall = absl::GetFlag(FLAGS_prefill_stall);
  c.max_active_sessions = absl::GetFlag(FLAGS_max_active_sessions);
  c.drain_delay_s = absl::GetFlag(FLAGS_drain_delay);
  c.drain_timeout_s = absl::GetFlag(FLAGS_drain_timeout_s);
  if (absl::Status s = c.Validate(); !s.ok()) {
    std::fprintf(stderr, "kvfold-inference: %s\n", s.ToString().c_str());
    return 2;
  }

  auto server = kvfold::service::InferenceServer::Start(c);
  if (!server.ok()) {
    std::fprintf(stderr, "kvfold-inference: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (!(*server)->metrics_address().empty()) {
    std::fprintf(stderr, "kvfold-inference metrics on %s\n", (*server)->metrics_address().c_str());
  }
  // The HTTP line first: launchers read up to the "listening on" line.
  if ((*server)->http_port() > 0) {
    const std::string& a = (*server)->address();
    std::printf("kvfold-inference http api on %s:%d\n", a.substr(0, a.rfind(':')).c_str(),
                (*server)->http_port());
  }
  std::printf("kvfold-inference listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);

  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) {
    const absl::Status reloaded = (*server)->ReloadAuth();
    std::fprintf(stderr, "kvfold-inference: SIGHUP: tokens %s\n",
                 reloaded.ok() ? "reloaded" : reloaded.ToString().c_str());
  }
  std::fprintf(stderr, "kvfold-inference: signal %d, draining\n", signal_number);
  (*server)->Shutdown();
  server->reset();
  std::fprintf(stderr, "kvfold-inference: stopped\n");
  return 0;
}
