// Structured request logs: one JSON object per line for every finished RPC or HTTP request
// (time, level, front, method, status, timings, tenant, session, version, W3C trace id),
// written to one stream (stderr by default) under a lock so lines never interleave.
// Field names and the rules on what is never logged: docs/observability.md.
//
// Secrets are never written: no bearer tokens, no authorization metadata, no prompt or
// generated text unless RequestLogOptions::log_prompts is set.
#ifndef KVFOLD_COMMON_REQUEST_LOG_H_
#define KVFOLD_COMMON_REQUEST_LOG_H_

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvfold::logging {

enum class Level { kDebug, kInfo, kWarn, kError, kOff };

// "debug" | "info" | "warn" | "error" | "off"; InvalidArgument otherwise.
absl::StatusOr<Level> ParseLevel(std::string_view name);
const char* LevelName(Level level);

// A W3C Trace Context `traceparent` header: "00-<32 hex trace id>-<16 hex parent id>-<2 hex
// flags>". nullopt for anything malformed (wrong lengths, upper-case or non-hex digits, an
// all-zero id, version ff): the request is then logged without a trace id.
struct TraceParent {
  std::string trace_id;   // 32 lower-case hex digits
  std::string parent_id;  // 16 lower-case hex digits
  bool sampled = false;
};
std::optional<TraceParent> ParseTraceParent(std::string_view header);

struct RequestRecord {
  std::string front;   // "grpc" | "http"
  std::string method;  // "/kvfold.v1.InferenceService/Generate", "POST /v1/chat/completions"
  // Written as its canonical name ("OK", "NOT_FOUND", ...); the HTTP front maps its
  // outcome to the same codes and also sets http_status.
  absl::StatusCode code = absl::StatusCode::kUnknown;
  int http_status = 0;  // HTTP front only
  std::string error;    // status message when not OK
  double duration_ms = 0;
  std::string tenant;  // authenticated tenant; "" when auth is off or failed
  std::string session;
  uint64_t version = 0;  // memory version the call produced or read (0: none)
  std::string trace_id;
  std::string parent_id;
  std::string peer;
  std::vector<std::pair<std::string, double>> timings_ms;  // "ttft", "queue", ...
  std::vector<std::pair<std::string, int64_t>> counts;     // "prompt_tokens", ...
  std::string prompt;                                      // written only with log_prompts
  // A health probe or metrics scrape (the HTTP front's /health*, /metrics): logged at
  // debug and not counted as a request, like gRPC's own services.
  bool probe = false;
};

// The level a finished request logs at: probes and gRPC's own services (health probes,
// reflection) are debug; OK and the caller's own mistakes are info; server-side failures (INTERNAL,
// UNKNOWN, DATA_LOSS) are error; the rest warn.
Level LevelFor(const RequestRecord& record);

struct RequestLogOptions {
  // Requests below this level are not written. Default: info (every request).
  Level min_level = Level::kInfo;
  // Write RequestRecord::prompt. Default: false (prompts and outputs may be personal data).
  bool log_prompts = false;
  // Where lines go; must outlive the logger. Default: stderr.
  std::FILE* sink = stderr;
};

class RequestLogger {
 public:
  explicit RequestLogger(RequestLogOptions options) : options_(options) {}
  const RequestLogOptions& options() const { return options_; }

  // Writes the record's JSON line (when its level passes) and flushes.
  void Write(const RequestRecord& record);
  // The JSON object (one line, no newline). `time` is RFC 3339 UTC with milliseconds.
  std::string Format(const RequestRecord& record, std::string_view time) const;

 private:
  const RequestLogOptions options_;
  std::mutex mu_;
};

}  // namespace kvfold::logging

#endif  // KVFOLD_COMMON_REQUEST_LOG_H_
