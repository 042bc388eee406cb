// ObservedExchange (observed_exchange.h).
#include "inference_svc/http/observed_exchange.h"

#include "absl/strings/str_cat.h"
#include "inference_svc/http/openai_protocol.h"

namespace kvfold::http {
namespace {

// The code an answer without an explicit status stands for (the inverse of HttpStatusOf
// on the statuses the front answers by itself).
absl::StatusCode CodeOfHttpStatus(int http_status) {
  if (http_status >= 200 && http_status < 300) return absl::StatusCode::kOk;
  switch (http_status) {
    case 400:
    case 413:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kAborted;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 499:
      return absl::StatusCode::kCancelled;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

ObservedExchange::ObservedExchange(std::shared_ptr<HttpExchange> inner, const HttpRequest& request,
                                   bool probe, Observer observer)
    : inner_(std::move(inner)),
      observer_(std::move(observer)),
      start_(std::chrono::steady_clock::now()) {
  record_.front = "http";
  record_.method = absl::StrCat(request.method, " ", request.path);
  record_.probe = probe;
  record_.peer = request.peer;
  // Only the trace context is read from the headers: Authorization and every other header
  // stay out of the record.
  if (auto trace = logging::ParseTraceParent(request.Header("traceparent")); trace.has_value()) {
    record_.trace_id = trace->trace_id;
    record_.parent_id = trace->parent_id;
  }
}

void ObservedExchange::Start() {
  std::weak_ptr<ObservedExchange> weak = weak_from_this();
  inner_->OnClientGone([weak] {
    auto self = weak.lock();
    if (self == nullptr) return;
    std::function<void()> on_gone;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->gone_ = true;
      on_gone = std::move(self->on_gone_);
    }
    self->Complete(499, absl::StatusCode::kCancelled);
    if (on_gone) on_gone();
  });
}

ObservedExchange::~ObservedExchange() {
  // Unanswered: the inner exchange answers 500 when it is dropped (below); a client that
  // left was recorded when it left.
  Complete(500, std::nullopt);
}

void ObservedExchange::Respond(int status, std::string_view content_type, std::string body,
                               HttpHeaders extra_headers) {
  inner_->Respond(status, content_type, std::move(body), std::move(extra_headers));
  Complete(status, std::nullopt);
}

void ObservedExchange::StartStream(int status, std::string_view content_type,
                                   HttpHeaders extra_headers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (http_status_ == 0) http_status_ = status;
  }
  inner_->StartStream(status, content_type, std::move(extra_headers));
}

void ObservedExchange::Write(std::string chunk) { inner_->Write(std::move(chunk)); }

void ObservedExchange::End() {
  inner_->End();
  int status = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    status = http_status_;
  }
  Complete(status, std::nullopt);
}

void ObservedExchange::OnClientGone(std::function<void()> on_gone) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gone_) {
      on_gone_ = std::move(on_gone);
      return;
    }
  }
  on_gone();
}

void ObservedExchange::RespondError(const absl::Status& status, int64_t retry_after_ms) {
  SetStatus(status);
  HttpHeaders headers;
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  if (retry_after_ms > 0) {
    headers.emplace_back("Retry-After", std::to_string((retry_after_ms + 999) / 1000));
  }
  Respond(HttpStatusOf(status.code()), "application/json", ErrorJson(status), std::move(headers));
}

void ObservedExchange::SetStatus(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = status;
}

void ObservedExchange::Annotate(const std::function<void(logging::RequestRecord*)>& fill) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!completed_) fill(&record_);
}

void ObservedExchange::Complete(int http_status, std::optional<absl::StatusCode> code) {
  logging::RequestRecord record;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completed_) return;
    completed_ = true;
    record_.http_status = http_status;
    if (code.has_value()) {
      record_.code = *code;
      if (*code == absl::StatusCode::kCancelled) record_.error = "the client went away";
    } else if (status_.has_value()) {
      record_.code = status_->code();
      record_.error = std::string(status_->message());
    } else {
      record_.code = CodeOfHttpStatus(http_status);
    }
    record_.duration_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    record = std::move(record_);
  }
  if (observer_) observer_(record);
}

}  // namespace kvfold::http
