#include "memory_svc/service/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvfold::memory_svc {

void Metrics::Record(const std::string& method, absl::StatusCode code, double seconds,
                     uint64_t bytes_in, uint64_t bytes_out) {
  absl::MutexLock lock(&mu_);
  ++requests_[{method, static_cast<int>(code)}];
  Histogram& h = latency_[method];
  size_t bucket = 0;
  while (bucket < kBuckets.size() && seconds > kBuckets[bucket]) ++bucket;
  if (bucket < kBuckets.size()) ++h.counts[bucket];
  ++h.count;
  h.sum += seconds;
  bytes_written_ += bytes_in;
  bytes_read_ += bytes_out;
  if (code == absl::StatusCode::kAborted) ++aborts_;
}

std::string Metrics::RenderPrometheus() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  absl::StrAppend(&out, "# HELP kvfold_memory_requests_total Finished RPCs by method and code.\n",
                  "# TYPE kvfold_memory_requests_total counter\n");
  for (const auto& [key, n] : requests_) {
    absl::StrAppend(&out, "kvfold_memory_requests_total{method=\"", key.first, "\",code=\"",
                    absl::StatusCodeToString(static_cast<absl::StatusCode>(key.second)),
                    "\"} ", n, "\n");
  }
  absl::StrAppend(&out, "# HELP kvfold_memory_payload_bytes_written_total Committed payload bytes.\n",
                  "# TYPE kvfold_memory_payload_bytes_written_total counter\n",
                  "kvfold_memory_payload_bytes_written_total ", bytes_written_, "\n");
  absl::StrAppend(&out, "# HELP kvfold_memory_payload_bytes_read_total Served payload bytes.\n",
                  "# TYPE kvfold_memory_payload_bytes_read_total counter\n",
                  "kvfold_memory_payload_bytes_read_total ", bytes_read_, "\n");
  absl::StrAppend(&out, "# HELP kvfold_memory_cas_aborts_total Compare-and-set losses.\n",
                  "# TYPE kvfold_memory_cas_aborts_total counter\n",
                  "kvfold_memory_cas_aborts_total ", aborts_, "\n");
  absl::StrAppend(&out, "# HELP kvfold_memory_request_seconds RPC latency by method.\n",
                  "# TYPE kvfold_memory_request_seconds histogram\n");
  for (const auto& [method, h] : latency_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      cumulative += h.counts[i];
      absl::StrAppend(&out, "kvfold_memory_request_seconds_bucket{method=\"", method,
                      "\",le=\"", kBuckets[i], "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "kvfold_memory_request_seconds_bucket{method=\"", method,
                    "\",le=\"+Inf\"} ", h.count, "\n");
    absl::StrAppend(&out, "kvfold_memory_request_seconds_sum{method=\"", method, "\"} ",
                    absl::StrFormat("%.6f", h.sum), "\n");
    absl::StrAppend(&out, "kvfold_memory_request_seconds_count{method=\"", method, "\"} ",
                    h.count, "\n");
  }
  if (extra_) out += extra_();
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const Metrics* metrics, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("metrics socket: ", strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string error = strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("metrics port ", port, ": ", error));
  }
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(metrics, fd, ntohs(addr.sin_port)));
}

MetricsHttpServer::MetricsHttpServer(const Metrics* metrics, int fd, int port)
    : metrics_(metrics), fd_(fd), port_(port), thread_([this] { Serve(); }) {}

MetricsHttpServer::~MetricsHttpServer() {
  stop_ = true;
  thread_.join();
  close(fd_);
}

void MetricsHttpServer::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    timeval timeout{1, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char buf[2048];
    const ssize_t n = recv(conn, buf, sizeof(buf) - 1, 0);
    const std::string request(buf, n > 0 ? static_cast<size_t>(n) : 0);
    std::string response;
    if (request.rfind("GET /metrics", 0) == 0) {
      const std::string body = metrics_->RenderPrometheus();
      response = absl::StrCat(
          "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: ",
          body.size(), "\r\nConnection: close\r\n\r\n", body);
    } else {
      response = "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    }
    size_t sent = 0;
    while (sent < response.size()) {
      const ssize_t w = send(conn, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += static_cast<size_t>(w);
    }
    close(conn);
  }
}

}  // namespace kvfold::memory_svc
