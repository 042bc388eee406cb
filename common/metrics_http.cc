#include "common/metrics_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvfold::metrics {
namespace {

// Splits "HOST:PORT" / "[V6]:PORT".
absl::Status SplitHostPort(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", listen, "' is not HOST:PORT"));
  }
  *host = listen.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  if (!absl::SimpleAtoi(listen.substr(colon + 1), port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", listen, "': bad port"));
  }
  return absl::OkStatus();
}

constexpr int kRecvTimeoutMs = 2000;
constexpr int kAcceptBackoffMs = 100;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, std::function<std::string()> render, std::function<bool()> ready) {
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(listen, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", listen, "': host must be a numeric IP address"));
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    return absl::UnavailableError("metrics: socket() failed");
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 16) == 0;
  ::freeaddrinfo(found);
  if (!bound) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", listen, ": ", std::strerror(err)));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int bound_port = addr.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  auto server = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer());
  server->listen_fd_ = fd;
  server->port_ = bound_port;
  server->address_ = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", bound_port);
  server->render_ = std::move(render);
  server->ready_ = std::move(ready);
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  // Connections still being served call render_ and ready_: wait for them (each ends
  // within its receive and send timeouts).
  std::unique_lock<std::mutex> lock(clients_->mu);
  clients_->idle.wait(lock, [this] { return clients_->active == 0; });
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MetricsHttpServer::Loop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      // Out of descriptors or memory the connection stays queued and poll reports it at
      // once again: wait instead of spinning.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kAcceptBackoffMs));
      }
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(clients_->mu);
      if (clients_->active >= kMaxClients) {
        ::close(client);
        continue;
      }
      ++clients_->active;
    }
    auto serve = [this, clients = clients_, client] {
      Serve(client);
      ::close(client);
      std::lock_guard<std::mutex> lock(clients->mu);
      if (--clients->active == 0) clients->idle.notify_all();
    };
    try {
      std::thread(serve).detach();
    } catch (const std::system_error&) {
      // The process is out of threads (a container's pid limit): serve this one here, so
      // probes and scrapes are still answered, one at a time, instead of ending the
      // process with an uncaught exception.
      serve();
    }
  }
}

void MetricsHttpServer::Serve(int client) {
  // A client that does not read its answer cannot hold the thread for longer either.
  const timeval send_timeout{kRecvTimeoutMs / 1000, 0};
  ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  // Read the request head (bounded in size and time: a silent client cannot stall scrapes
  // for longer than kRecvTimeoutMs).
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    pollfd p{client, POLLIN, 0};
    if (::poll(&p, 1, kRecvTimeoutMs) <= 0) break;
    const ssize_t n = ::recv(client, buf, sizeof(buf), 0);
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  auto is_get = [&request](const char* path) {
    const std::string prefix = absl::StrCat("GET ", path);
    return request.rfind(prefix + " ", 0) == 0 || request.rfind(prefix + "?", 0) == 0;
  };
  std::string body;
  std::string status = "200 OK";
  if (is_get("/metrics")) {
    body = render_();
  } else if (is_get("/readyz")) {
    const bool ready = !ready_ || ready_();
    status = ready ? "200 OK" : "503 Service Unavailable";
    body = ready ? "ready\n" : "not ready\n";
  } else if (is_get("/livez")) {
    body = "alive\n";
  } else {
    status = "404 Not Found";
    body = "try GET /metrics, /readyz or /livez\n";
  }
  const std::string response = absl::StrCat(
      "HTTP/1.1 ", status, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
      "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  size_t off = 0;
  while (off < response.size()) {
    const ssize_t w = ::send(client, response.data() + off, response.size() - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
}

}  // namespace kvfold::metrics
