// HttpServer: HTTP/1.1 on Boost.Beast, asynchronous, for JSON APIs and server-sent events.
//
// A fixed number of I/O threads serve every connection (keep-alive, chunked streaming);
// nothing holds a thread while a connection waits, so thousands of open event streams
// cost memory, not threads. Handlers run on an I/O thread and must not block: they answer
// at once or hand the work to their own threads and answer later through the exchange,
// which is thread-safe.
#ifndef KVFOLD_INFERENCE_SVC_HTTP_HTTP_SERVER_H_
#define KVFOLD_INFERENCE_SVC_HTTP_HTTP_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvfold::http {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // target without the query string
  std::string query;   // after '?', undecoded
  HttpHeaders headers;
  std::string body;
  std::string peer;  // the client's address, "ipv4:127.0.0.1:50312" (gRPC's spelling)

  // The first header of that name (case-insensitive), "" when absent.
  std::string_view Header(std::string_view name) const;
};

// One request's answer: either one Respond, or StartStream, any number of Write, End.
// Every method may be called from any thread; calls after the connection closed are
// dropped. Dropping the last reference without answering answers 500. An exchange must
// not outlive its HttpServer.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void Respond(int status, std::string_view content_type, std::string body,
                       HttpHeaders extra_headers = {}) = 0;
  // A chunked response whose body follows through Write (server-sent events).
  virtual void StartStream(int status, std::string_view content_type,
                           HttpHeaders extra_headers = {}) = 0;
  virtual void Write(std::string chunk) = 0;
  virtual void End() = 0;
  // `on_gone` runs once (on an I/O thread) if the client closes the connection or the
  // connection fails before the answer is complete; at once if that already happened.
  virtual void OnClientGone(std::function<void()> on_gone) = 0;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;

struct HttpServerOptions {
  // Address to bind. Default: loopback.
  std::string host = "127.0.0.1";
  // 0 = any free port (see HttpServer::port()).
  int port = 0;
  // I/O threads. Default 2.
  int io_threads = 2;
  // Larger request bodies are answered 413. Default 8 MiB.
  size_t max_body_bytes = 8u << 20;
  // How long a connection may take to send a request's header, which is also how long a
  // keep-alive connection may idle between requests (then it is closed). The body has 300 s
  // more. Default 60 s.
  std::chrono::milliseconds header_timeout{60000};
  // Open connections at most; one more is answered 503 ("busy", Retry-After: 1) and
  // closed. 0 = DefaultMaxConnections().
  size_t max_connections = 0;
};

// Half the process's descriptor limit (RLIMIT_NOFILE), within [16, 16384]: the other half
// stays for gRPC, the store and the model files.
size_t DefaultMaxConnections();

class HttpServer {
 public:
  // Binds and starts serving. Unavailable when the address cannot be bound,
  // InvalidArgument for a bad host or thread count.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           HttpHandler handler);
  // Stops accepting, closes every connection, joins the I/O threads.
  ~HttpServer();
  void Stop();

  int port() const;
  // Connections open right now, the limit, and the connections refused for it so far.
  size_t open_connections() const;
  size_t max_connections() const;
  uint64_t refused_connections() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_HTTP_SERVER_H_
