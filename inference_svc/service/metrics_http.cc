#include "inference_svc/service/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvfold::service {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    int port, std::function<std::string()> render) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError("metrics: socket() failed");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 8) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on 127.0.0.1:", port));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  auto server = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer());
  server->listen_fd_ = fd;
  server->port_ = ntohs(addr.sin_port);
  server->render_ = std::move(render);
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MetricsHttpServer::Loop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int client = ::accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    char buf[2048];
    ssize_t n = ::recv(client, buf, sizeof(buf) - 1, 0);
    std::string request(buf, n > 0 ? static_cast<size_t>(n) : 0);
    std::string body, status = "200 OK";
    if (request.rfind("GET /metrics", 0) == 0) {
      body = render_();
    } else {
      status = "404 Not Found";
      body = "try /metrics\n";
    }
    std::string response = absl::StrCat("HTTP/1.0 ", status,
                                         "\r\nContent-Type: text/plain; version=0.0.4\r\n"
                                         "Content-Length: ",
                                         body.size(), "\r\nConnection: close\r\n\r\n", body);
    size_t off = 0;
    while (off < response.size()) {
      ssize_t w = ::send(client, response.data() + off, response.size() - off, MSG_NOSIGNAL);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    ::close(client);
  }
}

}  // namespace kvfold::service
