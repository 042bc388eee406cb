// A small blocking HTTP/1.1 client for tests (Boost.Beast): one request per connection,
// the whole (possibly chunked) body read, or a stream opened and read event by event.
#ifndef KVFOLD_TESTS_INTEGRATION_HTTP_CLIENT_H_
#define KVFOLD_TESTS_INTEGRATION_HTTP_CLIENT_H_

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvfold::testing {

struct HttpReply {
  int status = 0;  // 0: no answer (connection failed)
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  std::string Header(const std::string& name) const {
    for (const auto& [k, v] : headers) {
      if (boost::beast::iequals(k, name)) return v;
    }
    return "";
  }
  // The "data: ..." payloads of a server-sent-event body, in order.
  std::vector<std::string> Events() const {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      out.push_back(body.substr(pos + 6, end - pos - 6));
      pos = end == std::string::npos ? body.size() : end + 2;
    }
    return out;
  }
};

using HttpHeaderList = std::vector<std::pair<std::string, std::string>>;

class HttpConnection {
 public:
  explicit HttpConnection(int port) : socket_(io_) {
    boost::beast::error_code ec;
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)},
                    ec);
    connected_ = !ec;
  }

  // Sends one request.
  bool Send(const std::string& method, const std::string& target, const std::string& body,
            const HttpHeaderList& headers = {}) {
    namespace http = boost::beast::http;
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    boost::beast::error_code ec;
    http::write(socket_, req, ec);
    return connected_ && !ec;
  }

  // Reads one whole response.
  HttpReply Read() {
    namespace http = boost::beast::http;
    HttpReply reply;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    boost::beast::error_code ec;
    http::read(socket_, buffer_, parser, ec);
    if (ec) return reply;
    reply.status = parser.get().result_int();
    reply.body = parser.get().body();
    for (const auto& f : parser.get()) {
      reply.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    }
    return reply;
  }

  // Reads until `needle` appeared in the raw bytes (headers and chunk framing included);
  // returns what was read. For watching a stream begin.
  std::string ReadUntil(const std::string& needle) {
    std::string raw;
    char buf[4096];
    boost::beast::error_code ec;
    while (raw.find(needle) == std::string::npos) {
      const size_t n = socket_.read_some(boost::asio::buffer(buf), ec);
      if (ec) break;
      raw.append(buf, n);
    }
    return raw;
  }

  void Close() {
    boost::beast::error_code ec;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
  bool connected_ = false;
};

inline HttpReply HttpCall(int port, const std::string& method, const std::string& target,
                          const std::string& body = "", const HttpHeaderList& headers = {}) {
  HttpConnection c(port);
  if (!c.Send(method, target, body, headers)) return {};
  return c.Read();
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INTEGRATION_HTTP_CLIENT_H_
