// ObservedExchange: an HttpExchange that records what its request did as one
// logging::RequestRecord (front "http", method "POST /v1/chat/completions", status, duration,
// tenant, session, version, timings, W3C trace id from the `traceparent` header) and hands
// it to an observer exactly once: when the answer is complete (Respond, or End of a
// stream), when the client went away (CANCELLED, HTTP 499), or when the exchange is dropped
// unanswered (INTERNAL, HTTP 500, which the server answers). The observer writes the
// request log line and the request metrics (docs/observability.md).
//
// Handlers add what only they know with Annotate, and give the status an error answer
// stands for with RespondError (the record then carries its code, not a guess from the
// HTTP status). Thread-safe like every exchange.
#ifndef KVFOLD_INFERENCE_SVC_HTTP_OBSERVED_EXCHANGE_H_
#define KVFOLD_INFERENCE_SVC_HTTP_OBSERVED_EXCHANGE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/request_log.h"
#include "inference_svc/http/http_server.h"

namespace kvfold::http {

class ObservedExchange final : public HttpExchange,
                               public std::enable_shared_from_this<ObservedExchange> {
 public:
  using Observer = std::function<void(const logging::RequestRecord&)>;

  // `probe`: a health check or metrics scrape (logged at debug, not counted as a request).
  // Call Start() once right after construction.
  ObservedExchange(std::shared_ptr<HttpExchange> inner, const HttpRequest& request, bool probe,
                   Observer observer);
  // Registers the client-gone watch on the inner exchange.
  void Start();
  ~ObservedExchange() override;

  void Respond(int status, std::string_view content_type, std::string body,
               HttpHeaders extra_headers = {}) override;
  void StartStream(int status, std::string_view content_type,
                   HttpHeaders extra_headers = {}) override;
  void Write(std::string chunk) override;
  void End() override;
  // `on_gone` runs after the record is completed as CANCELLED.
  void OnClientGone(std::function<void()> on_gone) override;

  // Answers `status` in OpenAI's error JSON with its HTTP status (and WWW-Authenticate for
  // UNAUTHENTICATED, Retry-After for a positive `retry_after_ms`); the record gets its code
  // and message.
  void RespondError(const absl::Status& status, int64_t retry_after_ms = 0);
  // The status the answer stands for, when it is not the one the HTTP status implies (an
  // error sent inside a started stream).
  void SetStatus(const absl::Status& status);
  // Adds fields to the record (tenant, session, version, timings, counts, prompt); ignored
  // once the record is complete.
  void Annotate(const std::function<void(logging::RequestRecord*)>& fill);

 private:
  // Completes the record (once): the code from SetStatus, else from `http_status`.
  void Complete(int http_status, std::optional<absl::StatusCode> code);

  const std::shared_ptr<HttpExchange> inner_;
  const Observer observer_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  logging::RequestRecord record_;
  std::optional<absl::Status> status_;  // from SetStatus / RespondError
  int http_status_ = 0;                 // of StartStream
  bool completed_ = false;
  bool gone_ = false;
  std::function<void()> on_gone_;
};

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_OBSERVED_EXCHANGE_H_
