// kvfold-inference: one inference replica. See docs/service.md.
//
//   kvfold-inference --model DIR --projector DIR --memory-store 127.0.0.1:7070
//       --listen 127.0.0.1:7071
// Prints "kvfold-inference listening on ADDR" once it accepts calls. SIGTERM/SIGINT: the
// drain of docs/observability.md (NOT_SERVING, serve for --drain-delay, refuse new calls,
// finish and checkpoint the turns in flight, exit 0). SIGHUP: reload the tokens
// file. Without --tokens-file it refuses to start unless --insecure-no-auth is given.
// Flags: `kvfold-inference --help` (docs/cli.md); `--config FILE` reads them from a file.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/command_line.h"
#include "common/daemon_signals.h"
#include "inference_svc/engine/session.h"
#include "inference_svc/memory/session_block.h"
#include "inference_svc/service/server.h"

namespace {

// The flag takes the KV mode names of core/kv_mode.h, the one parser of the CLI and the
// servers.
absl::StatusOr<kvfold::core::KvMode> ParseMode(const std::string& name) {
  absl::StatusOr<kvfold::core::KvMode> mode = kvfold::core::ParseKvMode(name);
  if (!mode.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--default-mode: ", mode.status().message()));
  }
  return *mode;
}

// The replica's own store token: from a file, else the environment. Secrets on the
// command line are visible to every user through ps and /proc.
absl::StatusOr<std::string> StoreToken(const std::string& file) {
  if (!file.empty()) return kvfold::ReadSecretFile(file);
  const char* env = std::getenv("KVFOLD_STORE_TOKEN");
  return std::string(env == nullptr ? "" : env);
}

// The flags, bound to the config struct (its field comments are the reference). Strings
// that need parsing (modes, dtypes) and the store token file stay strings here.
struct Flags {
  kvfold::service::ServiceConfig config;
  std::string store_token_file;
  std::string kv_dtype = "f32";
  std::string default_mode = "memory";
};

void AddFlags(CLI::App& app, Flags& f) {
  kvfold::service::ServiceConfig& c = f.config;
  kvfold::AddConfigFileFlag(app);
  app.add_option("--model", c.model_path,
                 "model directory (HF safetensors), GGUF file or llama2.c checkpoint")
      ->required();
  app.add_option("--tokenizer", c.tokenizer_path,
                 "tokenizer file (default: found next to the model)");
  app.add_option("--projector", c.projector_path, "projector directory; empty = no memory modes");
  c.memory_store = "127.0.0.1:7070";
  app.add_option("--memory-store", c.memory_store, "kvfold-memory address host:port");
  app.add_option("--memory-store-tls-ca", c.memory_store_tls_ca,
                 "PEM CA for TLS to the store (empty: plaintext)");
  app.add_option("--memory-store-tls-cert", c.memory_store_tls_cert,
                 "PEM client certificate for a store that requires mTLS (with "
                 "--memory-store-tls-key)");
  app.add_option("--memory-store-tls-key", c.memory_store_tls_key,
                 "PEM private key of --memory-store-tls-cert");
  app.add_option("--store-token-file", f.store_token_file,
                 "file holding the bearer token for the store when a caller sent none (callers' "
                 "tokens are forwarded); else $KVFOLD_STORE_TOKEN; never on the command line");
  app.add_option("--listen", c.listen, "listen address (port 0 = any free port)");
  app.add_option("--backend", c.backend, "engine backend: cpu, cpu-ref, cuda[:N] (when built)");
  app.add_option("--threads", c.threads, "compute threads (0 = the CPUs this process may use)")
      ->check(kvfold::NonNegative());
  app.add_option("--kv-pool-bytes", c.kv_pool_bytes,
                 "KV pool bytes (admission measures against it)");
  kvfold::AddSwitch(app, "--kv-populate", c.kv_populate,
                    "back the whole KV pool's memory at start-up (NOT_SERVING until done)");
  app.add_option("--kv-dtype", f.kv_dtype, "KV cache element type: f32|f16|int8 (KIVI int8 codes)");
  app.add_option("--session-cache-bytes", c.session_cache_bytes,
                 "local session cache budget (bytes)");
  app.add_option("--default-mode", f.default_mode, "full|sliding|sink|memory|memory_only");
  app.add_option("--default-window", c.default_window,
                 "default window (0 = projector's W, or 1024)");
  app.add_option("--default-sink", c.default_sink, "default sink tokens (sink mode)");
  kvfold::AddServerAccessFlags(app, {&c.tls_cert, &c.tls_key, &c.tls_client_ca, &c.tokens_file,
                                     &c.insecure_no_auth});
  app.add_option("--metrics-listen", c.metrics_listen,
                 "serve /metrics, /readyz, /livez on HOST:PORT (numeric host, e.g. 0.0.0.0:9091; "
                 "empty = off)");
  app.add_option("--log-level", c.log_level, "request logs: debug|info|warn|error|off");
  kvfold::AddSwitch(app, "--log-prompts", c.log_prompts, "write prompt text into the request logs");
  app.add_option("--http-port", c.http_port,
                 "OpenAI-compatible HTTP API on the --listen host at this port (0 = any free "
                 "port, -1 = off); see docs/http-api.md");
  app.add_option("--http-max-connections", c.http_max_connections,
                 "open HTTP connections at most, one more is answered 503 (0 = half the "
                 "descriptor limit, within [16, 16384])");
  app.add_option("--max-call-threads", c.max_call_threads,
                 "threads that run gRPC calls (a Generate call holds one while its turn waits "
                 "or runs); a call beyond them is RESOURCE_EXHAUSTED at once");
  app.add_option("--chat-template", c.chat_template,
                 "chat template: llama3|llama31|chatml|llama2|mistral|gemma|plain (default: detected)");
  app.add_option("--replica-name", c.replica_name,
                 "name reported in Usage.replica (default: address)");
  app.add_option("--max-prompt-tokens", c.max_prompt_tokens, "longest prompt accepted (tokens)");
  app.add_option("--max-new-tokens-cap", c.max_new_tokens_cap, "largest max_new_tokens accepted");
  app.add_option("--default-max-new-tokens", c.default_max_new_tokens,
                 "max_new_tokens when a request sets 0");
  kvfold::AddSwitch(app, "--batching", c.batching,
                    "batch all sessions' decode steps into one forward");
  app.add_option("--prefill-chunk-tokens", c.prefill_chunk_tokens,
                 "prompt tokens per scheduler step (at most)");
  app.add_option("--prefill-stall", c.prefill_stall,
                 "while others decode, prompt work may take at most this many times their decode "
                 "time (0 = fixed --prefill-chunk-tokens chunks)");
  app.add_option("--max-active-sessions", c.max_active_sessions,
                 "turns running at once (more wait)");
  app.add_option("--prefix-cache-entries", c.prefix_cache_entries,
                 "finished ephemeral sessions kept for the prompts that start with what they "
                 "fed (0 = off)")
      ->check(CLI::Range(0u, 4096u));
  app.add_option("--drain-delay", c.drain_delay_s,
                 "SIGTERM: seconds to keep serving while NOT_SERVING (endpoint removal)");
  app.add_option("--drain-timeout-s", c.drain_timeout_s,
                 "SIGTERM: seconds to let turns in flight finish");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "One kvfold inference replica: the gRPC InferenceService (and the OpenAI HTTP "
      "API with --http-port) over a kvfold-memory store.",
      "kvfold-inference"};
  kvfold::ApplyConvention(app);
  Flags flags;
  AddFlags(app, flags);
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  const kvfold::DaemonSignals signals;  // before any thread starts

  kvfold::service::ServiceConfig& c = flags.config;
  auto store_token = StoreToken(flags.store_token_file);
  if (!store_token.ok()) {
    std::fprintf(stderr, "kvfold-inference: %s\n", store_token.status().ToString().c_str());
    return kvfold::kExitUsage;
  }
  c.store_token = *std::move(store_token);
  auto kv_dtype = kvfold::engine::ParseKvDType(flags.kv_dtype);
  if (!kv_dtype.ok()) {
    std::fprintf(stderr, "kvfold-inference: --kv-dtype: %s\n",
                 std::string(kv_dtype.status().message()).c_str());
    return kvfold::kExitUsage;
  }
  c.kv_dtype = *kv_dtype;
  auto mode = ParseMode(flags.default_mode);
  if (!mode.ok()) {
    std::fprintf(stderr, "kvfold-inference: %s\n", mode.status().ToString().c_str());
    return kvfold::kExitUsage;
  }
  c.default_mode = *mode;
  if (absl::Status s = c.Validate(); !s.ok()) {
    std::fprintf(stderr, "kvfold-inference: %s\n", s.ToString().c_str());
    return kvfold::kExitUsage;
  }

  auto server = kvfold::service::InferenceServer::Start(c);
  if (!server.ok()) {
    std::fprintf(stderr, "kvfold-inference: %s\n", server.status().ToString().c_str());
    return kvfold::kExitFailure;
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

  const int signal_number = signals.WaitForStop([&] {
    const absl::Status reloaded = (*server)->ReloadAuth();
    std::fprintf(stderr, "kvfold-inference: SIGHUP: tokens %s\n",
                 reloaded.ok() ? "reloaded" : reloaded.ToString().c_str());
  });
  std::fprintf(stderr, "kvfold-inference: signal %d, draining\n", signal_number);
  (*server)->Shutdown();
  server->reset();
  std::fprintf(stderr, "kvfold-inference: stopped\n");
  return 0;
}
