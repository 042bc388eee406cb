#include "common/request_log.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvfold::logging {
namespace {

bool LowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

}  // namespace

absl::StatusOr<Level> ParseLevel(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  return absl::InvalidArgumentError(absl::StrCat("log level '", std::string(name),
                                                 "': expected debug, info, warn, error or off"));
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
    case Level::kOff:
      return "off";
  }
  return "info";
}

std::optional<TraceParent> ParseTraceParent(std::string_view header) {
  // version(2) - trace-id(32) - parent-id(16) - flags(2); a future version may append
  // "-..." fields, which version 00 forbids.
  if (header.size() < 55 || header[2] != '-' || header[35] != '-' || header[52] != '-') {
    return std::nullopt;
  }
  const std::string_view version = header.substr(0, 2);
  const std::string_view trace_id = header.substr(3, 32);
  const std::string_view parent_id = header.substr(36, 16);
  const std::string_view flags = header.substr(53, 2);
  if (!LowerHex(version) || !LowerHex(trace_id) || !LowerHex(parent_id) || !LowerHex(flags)) {
    return std::nullopt;
  }
  if (version == "ff" || AllZero(trace_id) || AllZero(parent_id)) return std::nullopt;
  if (version == "00" ? header.size() != 55 : (header.size() > 55 && header[55] != '-')) {
    return std::nullopt;
  }
  TraceParent out;
  out.trace_id = std::string(trace_id);
  out.parent_id = std::string(parent_id);
  out.sampled = (std::stoi(std::string(flags), nullptr, 16) & 1) != 0;
  return out;
}

Level LevelFor(const RequestRecord& record) {
  if (record.probe || record.method.rfind("/grpc.", 0) == 0) return Level::kDebug;
  switch (record.code) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      return Level::kError;
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return Level::kInfo;
    default:
      return Level::kWarn;
  }
}

std::string RequestLogger::Format(const RequestRecord& r, std::string_view time) const {
  nlohmann::ordered_json j;
  j["time"] = time;
  j["level"] = LevelName(LevelFor(r));
  j["msg"] = "request";
  j["front"] = r.front;
  j["method"] = r.method;
  j["code"] = absl::StatusCodeToString(r.code);
  if (r.http_status != 0) j["http_status"] = r.http_status;
  if (!r.error.empty()) j["error"] = r.error;
  j["duration_ms"] = r.duration_ms;
  if (!r.tenant.empty()) j["tenant"] = r.tenant;
  if (!r.session.empty()) j["session"] = r.session;
  if (r.version != 0) j["version"] = r.version;
  if (!r.trace_id.empty()) {
    j["trace_id"] = r.trace_id;
    j["parent_id"] = r.parent_id;
  }
  if (!r.peer.empty()) j["peer"] = r.peer;
  if (!r.timings_ms.empty()) {
    nlohmann::ordered_json t = nlohmann::ordered_json::object();
    for (const auto& [name, ms] : r.timings_ms) t[name] = ms;
    j["timings_ms"] = std::move(t);
  }
  for (const auto& [name, n] : r.counts) j[name] = n;
  if (options_.log_prompts && !r.prompt.empty()) j["prompt"] = r.prompt;
  // Invalid UTF-8 (a prompt cut mid-character) is replaced, never thrown on.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void RequestLogger::Write(const RequestRecord& record) {
  const Level level = LevelFor(record);
  if (options_.min_level == Level::kOff || level < options_.min_level) return;
  const std::string time =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  const std::string line = Format(record, time) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), options_.sink);
  std::fflush(options_.sink);
}

}  // namespace kvfold::logging
