#include "inference_svc/service/service_config.h"

#include "absl/strings/str_cat.h"
#include "common/request_log.h"

namespace kvfold::service {

absl::Status ServiceConfig::Validate() const {
  if (model_path.empty()) return absl::InvalidArgumentError("--model is required");
  if (memory_store.empty()) return absl::InvalidArgumentError("--memory-store is required");
  if (listen.empty()) return absl::InvalidArgumentError("--listen must not be empty");
  if (threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (kv_pool_bytes == 0) return absl::InvalidArgumentError("--kv-pool-bytes must be > 0");
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert/--tls-key");
  }
  if (tokens_file.empty() && !insecure_no_auth) {
    return absl::InvalidArgumentError(
        "no --tokens-file: refusing to serve without authentication (give --insecure-no-auth "
        "to accept every caller as tenant 'default')");
  }
  if (memory_store_tls_cert.empty() != memory_store_tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--memory-store-tls-cert and --memory-store-tls-key go together");
  }
  if (!memory_store_tls_cert.empty() && memory_store_tls_ca.empty()) {
    return absl::InvalidArgumentError("--memory-store-tls-cert needs --memory-store-tls-ca");
  }
  if (!logging::ParseLevel(log_level).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-level '", log_level, "': expected debug, info, warn, error or off"));
  }
  if (http_port < -1 || http_port > 65535) {
    return absl::InvalidArgumentError("--http-port must be in [0, 65535] (or -1: off)");
  }
  if (http_max_connections < 0) {
    return absl::InvalidArgumentError(
        "--http-max-connections must be >= 0 (0: from the descriptor limit)");
  }
  if (max_call_threads < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-call-threads must be >= 2, got ", max_call_threads));
  }
  if (max_prompt_tokens == 0) return absl::InvalidArgumentError("--max-prompt-tokens must be > 0");
  if (max_new_tokens_cap == 0)
    return absl::InvalidArgumentError("--max-new-tokens-cap must be > 0");
  if (default_max_new_tokens == 0 || default_max_new_tokens > max_new_tokens_cap) {
    return absl::InvalidArgumentError(
        absl::StrCat("--default-max-new-tokens must be in [1, ", max_new_tokens_cap, "]"));
  }
  if (prefill_chunk_tokens == 0)
    return absl::InvalidArgumentError("--prefill-chunk-tokens must be > 0");
  if (max_active_sessions == 0)
    return absl::InvalidArgumentError("--max-active-sessions must be > 0");
  if (!(prefill_stall >= 0) || prefill_stall > 1e6) {
    return absl::InvalidArgumentError("--prefill-stall must be in [0, 1e6]");
  }
  if (drain_timeout_s < 0) return absl::InvalidArgumentError("--drain-timeout-s must be >= 0");
  if (drain_delay_s < 0) return absl::InvalidArgumentError("--drain-delay must be >= 0");
  return absl::OkStatus();
}

}  // namespace kvfold::service
