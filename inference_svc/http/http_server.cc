// HttpServer on Boost.Beast (http_server.h). One strand per connection; every socket
// operation and every field of a Connection is touched only on that strand.
#include "inference_svc/http/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <deque>
#include <exception>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kvfold::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// How long a connection may take to send a request's body once its header is in.
constexpr std::chrono::seconds kBodyTimeout(300);
// Bytes read ahead while an answer is in progress (pipelined requests); more stops the
// read-ahead, so a client cannot make the server buffer without bound.
constexpr size_t kReadAheadLimit = 64 * 1024;
// After an accept failed for want of descriptors or memory: the connection stays queued and
// the next accept would fail at once, so the acceptor waits this long before trying again
// instead of spinning on the I/O threads.
constexpr std::chrono::milliseconds kAcceptBackoff(100);
// How long a connection refused for the connection limit may take to receive its 503 and
// close; and how many such refusals may be in flight (beyond that a connection is closed
// without an answer, so that refusing costs bounded descriptors too).
constexpr std::chrono::seconds kRefusalTimeout(1);
constexpr size_t kMaxRefusalsInFlight = 64;
// The answer to a connection over the limit (OpenAI's error shape; the client may retry).
const std::string& BusyResponse() {
  static const std::string* response = [] {
    constexpr std::string_view kBody =
        R"({"error":{"message":"too many open connections","type":"server_error","code":"busy"}})";
    return new std::string(
        absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Retry-After: 1\r\nConnection: close\r\nContent-Length: ",
                     kBody.size(), "\r\n\r\n", std::string(kBody)));
  }();
  return *response;
}

// Errors of accept() that say the process or system is out of descriptors or buffers.
bool IsResourceShortage(const beast::error_code& ec) {
  return ec == net::error::no_descriptors ||
         ec == boost::system::errc::too_many_files_open_in_system ||
         ec == net::error::no_buffer_space || ec == net::error::no_memory;
}

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (beast::iequals(key, beast::string_view(name.data(), name.size()))) return value;
  }
  return {};
}

struct HttpServer::Impl {
  // Declared before `io`: connections destroyed with io's pending handlers use them.
  HttpServerOptions options;
  HttpHandler handler;
  std::atomic<size_t> connections{0};
  std::atomic<bool> stopped{false};
  std::atomic<size_t> refusals_in_flight{0};
  std::atomic<uint64_t> refused{0};
  size_t max_connections = 0;  // resolved at Start
  int port = 0;
  net::io_context io;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_backoff;  // used by the accept chain only
  std::vector<std::thread> threads;

  void Accept();
  void Refuse(tcp::socket socket);
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl* server)
      : stream_(std::move(socket)), server_(server), idle_timer_(stream_.get_executor()) {
    server_->connections.fetch_add(1);
  }
  ~Connection() { server_->connections.fetch_sub(1); }

  void Begin() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadRequest(); });
  }

  // --- called through the exchange, from any thread --------------------------------
  void Post(std::function<void(Connection&)> fn) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), fn = std::move(fn)] { fn(*self); });
  }
  void DoRespond(int status, std::string content_type, std::string body, HttpHeaders extra);
  void DoStartStream(int status, std::string content_type, HttpHeaders extra);
  void DoWrite(std::string chunk);
  void DoEnd();
  void DoOnClientGone(std::function<void()> on_gone) {
    if (gone_) {
      on_gone();
    } else {
      on_gone_ = std::move(on_gone);
    }
  }

 private:
  struct Pending {  // one write, in order
    std::shared_ptr<bhttp::response<bhttp::string_body>> full;
    std::shared_ptr<bhttp::response<bhttp::empty_body>> head;
    std::shared_ptr<bhttp::response_serializer<bhttp::empty_body>> head_serializer;
    std::string chunk;
    bool last_chunk = false;
  };

  void ReadRequest();
  void OnHeader(beast::error_code ec);
  void OnRequest(beast::error_code ec);
  std::string Peer() {
    beast::error_code ec;
    const tcp::endpoint remote = stream_.socket().remote_endpoint(ec);
    if (ec) return "";
    const net::ip::address a = remote.address();
    return a.is_v4() ? absl::StrCat("ipv4:", a.to_string(), ":", remote.port())
                     : absl::StrCat("ipv6:[", a.to_string(), "]:", remote.port());
  }
  void WatchClient();
  void Enqueue(Pending p);
  void WriteNext();
  void Finish();  // the answer is complete
  void Close();
  void ClientGone() {
    if (gone_) return;
    gone_ = true;
    if (on_gone_) std::exchange(on_gone_, nullptr)();
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  // Closes a keep-alive connection whose read-ahead waits for a next request longer than
  // the header's time (the read-ahead was started without a timeout, mid-answer).
  net::steady_timer idle_timer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool answering_ = false;  // a request is with the handler
  bool answered_ = false;   // its Respond/StartStream arrived
  bool streaming_ = false;
  bool keep_alive_ = false;
  bool watching_ = false;  // a read-ahead is outstanding
  bool writing_ = false;
  bool finish_after_writes_ = false;
  bool gone_ = false;
  std::function<void()> on_gone_;
  std::deque<Pending> queue_;
};

class Exchange final : public HttpExchange {
 public:
  explicit Exchange(std::shared_ptr<Connection> c) : c_(std::move(c)) {}
  ~Exchange() override {
    if (!answered_.exchange(true)) {
      c_->Post([](Connection& c) {
        c.DoRespond(500, "application/json",
                    R"({"error":{"message":"no answer","type":"server_error"}})", {});
      });
    }
  }
  void Respond(int status, std::string_view content_type, std::string body,
               HttpHeaders extra) override {
    if (answered_.exchange(true)) return;
    c_->Post([=, ct = std::string(content_type), b = std::move(body),
              e = std::move(extra)](Connection& c) mutable {
      c.DoRespond(status, std::move(ct), std::move(b), std::move(e));
    });
  }
  void StartStream(int status, std::string_view content_type, HttpHeaders extra) override {
    if (answered_.exchange(true)) return;
    c_->Post([=, ct = std::string(content_type), e = std::move(extra)](Connection& c) mutable {
      c.DoStartStream(status, std::move(ct), std::move(e));
    });
  }
  void Write(std::string chunk) override {
    c_->Post([ch = std::move(chunk)](Connection& c) mutable { c.DoWrite(std::move(ch)); });
  }
  void End() override {
    c_->Post([](Connection& c) { c.DoEnd(); });
  }
  void OnClientGone(std::function<void()> on_gone) override {
    c_->Post([f = std::move(on_gone)](Connection& c) mutable { c.DoOnClientGone(std::move(f)); });
  }

 private:
  std::shared_ptr<Connection> c_;
  std::atomic<bool> answered_{false};
};

void Connection::ReadRequest() {
  idle_timer_.cancel();
  if (server_->stopped.load()) return Close();
  parser_.emplace();
  parser_->body_limit(server_->options.max_body_bytes);
  // The header's time also bounds how long a keep-alive connection may idle.
  stream_.expires_after(server_->options.header_timeout);
  bhttp::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

// The header is in (a Content-Length over the limit already failed it with body_limit). A
// client that sent "Expect: 100-continue" waits for "100 Continue" before its body (curl
// does for bodies over 1 MiB, and else waits a second): send it, then read the body.
void Connection::OnHeader(beast::error_code ec) {
  if (ec) return OnRequest(ec);
  stream_.expires_after(kBodyTimeout);
  auto read_body = [self = shared_from_this()] {
    bhttp::async_read(self->stream_, self->buffer_, *self->parser_,
                      [self](beast::error_code ec, size_t) { self->OnRequest(ec); });
  };
  const auto& head = parser_->get();
  if (head.version() < 11 || !beast::iequals(head[bhttp::field::expect], "100-continue") ||
      parser_->is_done()) {
    return read_body();
  }
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                   [self = shared_from_this(), read_body](beast::error_code ec, size_t) {
                     if (ec) return self->Close();
                     read_body();
                   });
}

void Connection::OnRequest(beast::error_code ec) {
  if (ec) {
    // A request the parser refused gets its status and the connection closes; a peer that
    // closed, a timeout or a socket error just closes.
    const bool malformed =
        ec.category() == bhttp::make_error_code(bhttp::error::body_limit).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message &&
        ec != bhttp::error::short_read;
    if (!malformed || !stream_.socket().is_open()) return Close();
    int status = 400;
    std::string message = "malformed HTTP request: " + ec.message();
    if (ec == bhttp::error::body_limit) {
      status = 413;
      message = "request body too large";
    } else if (ec == bhttp::error::header_limit) {
      status = 431;
      message = "request header fields too large";
    }
    keep_alive_ = false;
    answering_ = true;
    return DoRespond(
        status, "application/json",
        absl::StrCat(R"({"error":{"message":")", message, R"(","type":"invalid_request_error"}})"),
        {});
  }
  stream_.expires_never();
  bhttp::request<bhttp::string_body> req = parser_->release();
  keep_alive_ = req.keep_alive();
  HttpRequest request;
  request.method = std::string(req.method_string());
  const std::string_view target(req.target().data(), req.target().size());
  const size_t q = target.find('?');
  request.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) request.query = std::string(target.substr(q + 1));
  for (const auto& field : req) {
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  request.body = std::move(req.body());
  request.peer = Peer();
  answering_ = true;
  answered_ = false;
  streaming_ = false;
  WatchClient();
  // A handler that throws must not end the I/O thread (and the process): the exchange it
  // dropped answers 500.
  try {
    server_->handler(std::move(request), std::make_shared<Exchange>(shared_from_this()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvfold http: a handler threw: %s\n", e.what());
  }
}

// Reads ahead while an answer is in progress: EOF or an error means the client left (the
// turn behind a stream is cancelled); bytes are a pipelined next request, kept in buffer_,
// and end the watch (a client that sent its next request has not left): Finish() then
// starts that request. Re-arming the read here instead would wait for bytes the client
// never sends (it waits for our answer) while Finish() waited for that read: a hang.
// When no answer is in progress the read-ahead that returns bytes starts the next request.
void Connection::WatchClient() {
  if (watching_ || gone_) return;
  if (buffer_.size() >= kReadAheadLimit) return;
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->watching_ = false;
                            if (ec) {
                              self->ClientGone();
                              if (!self->answering_) self->Close();
                              return;
                            }
                            self->buffer_.commit(n);
                            if (!self->answering_) self->ReadRequest();
                          });
}

void Connection::DoRespond(int status, std::string content_type, std::string body,
                           HttpHeaders extra) {
  if (!answering_ || answered_) return;
  answered_ = true;
  auto res =
      std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(status), 11);
  res->set(bhttp::field::server, "kvfold");
  res->set(bhttp::field::content_type, content_type);
  for (auto& [k, v] : extra) res->set(k, v);
  res->keep_alive(keep_alive_);
  res->body() = std::move(body);
  res->prepare_payload();
  Pending p;
  p.full = std::move(res);
  Enqueue(std::move(p));
  finish_after_writes_ = true;
  if (!writing_) WriteNext();
}

void Connection::DoStartStream(int status, std::string content_type, HttpHeaders extra) {
  if (!answering_ || answered_) return;
  answered_ = true;
  streaming_ = true;
  auto res =
      std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(status), 11);
  res->set(bhttp::field::server, "kvfold");
  res->set(bhttp::field::content_type, content_type);
  res->set(bhttp::field::cache_control, "no-cache");
  for (auto& [k, v] : extra) res->set(k, v);
  res->keep_alive(keep_alive_);
  res->chunked(true);
  Pending p;
  p.head = res;
  p.head_serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
  Enqueue(std::move(p));
}

void Connection::DoWrite(std::string chunk) {
  if (!streaming_ || finish_after_writes_ || chunk.empty()) return;
  Pending p;
  p.chunk = std::move(chunk);
  Enqueue(std::move(p));
}

void Connection::DoEnd() {
  if (!streaming_ || finish_after_writes_) return;
  Pending p;
  p.last_chunk = true;
  Enqueue(std::move(p));
  finish_after_writes_ = true;
  if (!writing_) WriteNext();
}

void Connection::Enqueue(Pending p) {
  if (gone_) return;
  queue_.push_back(std::move(p));
  if (!writing_) WriteNext();
}

void Connection::WriteNext() {
  if (gone_) return;
  if (queue_.empty()) {
    if (finish_after_writes_) Finish();
    return;
  }
  writing_ = true;
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) {
    self->writing_ = false;
    self->queue_.pop_front();
    if (ec) {
      self->ClientGone();
      return self->Close();
    }
    self->WriteNext();
  };
  Pending& p = queue_.front();
  if (p.full) {
    bhttp::async_write(stream_, *p.full, std::move(done));
  } else if (p.head_serializer) {
    bhttp::async_write_header(stream_, *p.head_serializer, std::move(done));
  } else if (p.last_chunk) {
    net::async_write(stream_, bhttp::make_chunk_last(), std::move(done));
  } else {
    net::async_write(stream_, bhttp::make_chunk(net::buffer(p.chunk)), std::move(done));
  }
}

void Connection::Finish() {
  answering_ = false;
  answered_ = false;
  streaming_ = false;
  finish_after_writes_ = false;
  on_gone_ = nullptr;
  if (!keep_alive_) return Close();
  if (!watching_) return ReadRequest();
  // The read-ahead starts the next request; until it does the connection idles, for the
  // header's time at most (without this an idle keep-alive connection stayed open for good).
  idle_timer_.expires_after(server_->options.header_timeout);
  idle_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec && !self->answering_ && self->watching_) self->Close();
  });
}

void Connection::Close() {
  idle_timer_.cancel();
  ClientGone();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

}  // namespace

namespace {

// A connection over the limit: answered 503 and closed. After the answer the sending side
// is shut and the client's request read and dropped until it closes (or the timeout), so
// that closing does not reset the connection before the client has read the answer.
class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  Refusal(tcp::socket socket, HttpServer::Impl* server)
      : stream_(std::move(socket)), server_(server) {
    server_->refusals_in_flight.fetch_add(1);
  }
  ~Refusal() { server_->refusals_in_flight.fetch_sub(1); }

  void Start() {
    stream_.expires_after(kRefusalTimeout);
    net::async_write(stream_, net::buffer(BusyResponse()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->Close();
                       self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
                       self->Drain();
                     });
  }

 private:
  void Drain() {
    stream_.async_read_some(net::buffer(sink_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->Close();  // the client closed, or the timeout
                              self->Drain();
                            });
  }
  void Close() {
    beast::error_code ec;
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  std::array<char, 1024> sink_;
};

}  // namespace

void HttpServer::Impl::Refuse(tcp::socket socket) {
  refused.fetch_add(1);
  if (refusals_in_flight.load() >= kMaxRefusalsInFlight) {
    beast::error_code ec;
    socket.close(ec);
    return;
  }
  std::make_shared<Refusal>(std::move(socket), this)->Start();
}

void HttpServer::Impl::Accept() {
  acceptor->async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (stopped.load()) return;
    if (ec && IsResourceShortage(ec)) {
      accept_backoff->expires_after(kAcceptBackoff);
      accept_backoff->async_wait([this](beast::error_code) {
        if (!stopped.load()) Accept();
      });
      return;
    }
    if (!ec) {
      if (connections.load() >= max_connections) {
        Refuse(std::move(socket));
      } else {
        std::make_shared<Connection>(std::move(socket), this)->Begin();
      }
    }
    Accept();
  });
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              HttpHandler handler) {
  if (options.header_timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("http header_timeout must be > 0");
  }
  if (options.io_threads < 1 || options.io_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("http io_threads ", options.io_threads, " outside [1, 256]"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(options.host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad http host ", options.host));
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  impl->acceptor.emplace(impl->io);
  impl->acceptor->open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor->bind(endpoint, ec);
  if (!ec) impl->acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options.host, ":",
                                               options.port, ": ", ec.message()));
  }
  impl->port = impl->acceptor->local_endpoint().port();
  impl->max_connections =
      options.max_connections > 0 ? options.max_connections : DefaultMaxConnections();
  impl->accept_backoff.emplace(impl->io);
  impl->Accept();
  for (int i = 0; i < options.io_threads; ++i) {
    impl->threads.emplace_back([io = &impl->io] { io->run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  net::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor->close(ec);
  });
  impl_->io.stop();
  for (std::thread& t : impl_->threads) t.join();
}

int HttpServer::port() const { return impl_->port; }

size_t HttpServer::open_connections() const { return impl_->connections.load(); }

size_t HttpServer::max_connections() const { return impl_->max_connections; }

uint64_t HttpServer::refused_connections() const { return impl_->refused.load(); }

size_t DefaultMaxConnections() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 16384;
  return std::clamp<size_t>(static_cast<size_t>(limit.rlim_cur) / 2, 16, 16384);
}

}  // namespace kvfold::http
