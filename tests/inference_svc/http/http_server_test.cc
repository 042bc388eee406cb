// HttpServer on loopback: keep-alive requests, chunked event streams written from other
// threads, the client-gone callback when a client leaves mid-stream, oversized bodies.
#include "inference_svc/http/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/http_client.h"
#include "tests/testing/descriptors.h"

namespace kvfold::http {
namespace {

using ::kvfold::testing::ConnectLoopback;
using ::kvfold::testing::HttpCall;
using ::kvfold::testing::HttpConnection;
using ::kvfold::testing::ProcessCpuSeconds;
using ::kvfold::testing::ScopedDescriptorLimit;
using ::kvfold::testing::SilentConnections;
using ::testing::HasSubstr;

TEST(HttpServerTest, KeepAliveStreamsAndClientGone) {
  std::atomic<int> gone{0};
  std::vector<std::thread> writers;
  std::mutex writers_mu;
  auto server = HttpServer::Start({}, [&](HttpRequest req, std::shared_ptr<HttpExchange> ex) {
    if (req.path == "/echo") {
      ex->Respond(200, "text/plain",
                  req.method + " " + req.body + " " + std::string(req.Header("x-test")));
      return;
    }
    if (req.path == "/stream" || req.path == "/forever") {
      ex->OnClientGone([&gone] { gone.fetch_add(1); });
      const bool forever = req.path == "/forever";
      std::lock_guard<std::mutex> lock(writers_mu);
      writers.emplace_back([ex, forever] {  // answers from another thread
        ex->StartStream(200, "text/event-stream");
        for (int i = 0; i < 3; ++i) ex->Write("data: " + std::to_string(i) + "\n\n");
        if (!forever) ex->End();
      });
      return;
    }
    // No answer at all: the exchange's destructor answers 500.
  });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  // Two requests on one connection.
  HttpConnection c(port);
  ASSERT_TRUE(c.Send("POST", "/echo", "abc", {{"X-Test", "1"}}));
  auto first = c.Read();
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "POST abc 1");
  ASSERT_TRUE(c.Send("GET", "/stream", ""));
  auto streamed = c.Read();
  EXPECT_EQ(streamed.status, 200);
  EXPECT_EQ(streamed.Events(), (std::vector<std::string>{"0", "1", "2"}));
  ASSERT_TRUE(c.Send("POST", "/echo", "again"));
  EXPECT_EQ(c.Read().body, "POST again ");
  EXPECT_EQ(gone.load(), 0);

  EXPECT_EQ(HttpCall(port, "GET", "/unanswered").status, 500);

  // A client that leaves while a stream is open is noticed without any write.
  {
    HttpConnection leaving(port);
    ASSERT_TRUE(leaving.Send("GET", "/forever", ""));
    EXPECT_THAT(leaving.ReadUntil("data: 2"), HasSubstr("text/event-stream"));
    leaving.Close();
  }
  for (int i = 0; i < 200 && gone.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(gone.load(), 1);
  {
    std::lock_guard<std::mutex> lock(writers_mu);
    for (auto& t : writers) t.join();
  }
}

TEST(HttpServerTest, OversizedBodyIs413) {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  auto server = HttpServer::Start(options, [](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    ex->Respond(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(HttpCall((*server)->port(), "POST", "/x", std::string(5000, 'a')).status, 413);
  EXPECT_EQ(HttpCall((*server)->port(), "POST", "/x", std::string(500, 'a')).status, 200);
}

TEST(HttpServerTest, BadOptionsAndBusyPort) {
  HttpServerOptions options;
  options.io_threads = 0;
  EXPECT_EQ(HttpServer::Start(options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto first = HttpServer::Start({}, [](HttpRequest, std::shared_ptr<HttpExchange>) {});
  ASSERT_TRUE(first.ok());
  HttpServerOptions same;
  same.port = (*first)->port();
  EXPECT_EQ(HttpServer::Start(same, nullptr).status().code(), absl::StatusCode::kUnavailable);
}

// Reads from `fd` until `marker` arrived, the peer closed or 2 s passed; what was read.
std::string ReadUntil(int fd, const std::string& marker) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (got.find(marker) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    timeval tv{0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[1024];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n > 0) got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// "Expect: 100-continue" (curl sends it for bodies over 1 MiB, then waits a second for the
// interim answer): the server says "100 Continue" before the body is sent, and answers a
// Content-Length over the limit with 413 without waiting for a body at all.
TEST(HttpServerTest, ExpectContinueGetsTheInterimAnswerBeforeTheBody) {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  auto server = HttpServer::Start(options, [](HttpRequest req, std::shared_ptr<HttpExchange> ex) {
    ex->Respond(200, "text/plain", "got " + req.body);
  });
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  const int fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
      "Expect: 100-continue\r\n\r\n";
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  EXPECT_EQ(ReadUntil(fd, "\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(send(fd, "hello", 5, MSG_NOSIGNAL), 5);
  const std::string answer = ReadUntil(fd, "got hello");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_THAT(answer, HasSubstr("got hello"));
  close(fd);

  const int big = ConnectLoopback(port);
  ASSERT_GE(big, 0);
  const std::string big_head =
      "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5000\r\n"
      "Expect: 100-continue\r\n\r\n";
  ASSERT_EQ(send(big, big_head.data(), big_head.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(big_head.size()));
  const std::string refused = ReadUntil(big, "too large");
  EXPECT_EQ(refused.rfind("HTTP/1.1 413", 0), 0u) << refused;
  close(big);
}

// What the parser refuses gets a status before the close: bytes that are not HTTP 400, a
// header beyond Beast's 8 KiB 431; the server keeps serving.
TEST(HttpServerTest, MalformedRequestsGetTheirStatusBeforeTheClose) {
  auto server = HttpServer::Start({}, [](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    ex->Respond(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  const std::string huge_header =
      "GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  const std::pair<std::string, std::string> cases[] = {
      {"NOT HTTP AT ALL\r\n\r\n", "HTTP/1.1 400"},
      {"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n", "HTTP/1.1 400"},
      {huge_header, "HTTP/1.1 431"}};
  for (const auto& [request, status] : cases) {
    const int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    const std::string answer = ReadUntil(fd, "}}");
    EXPECT_EQ(answer.rfind(status, 0), 0u) << request.substr(0, 40) << ": " << answer;
    EXPECT_THAT(answer, HasSubstr("invalid_request_error"));
    close(fd);
  }
  EXPECT_EQ(::kvfold::testing::HttpCall(port, "GET", "/x").status, 200);
}

// A handler that throws ends neither its I/O thread nor the process: the request is
// answered 500 and the server keeps serving.
TEST(HttpServerTest, AHandlerThatThrowsIsA500) {
  auto server = HttpServer::Start({}, [](HttpRequest req, std::shared_ptr<HttpExchange> ex) {
    if (req.path == "/throw") throw std::runtime_error("handler failed");
    ex->Respond(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  for (int i = 0; i < 4; ++i) {  // more than the two I/O threads
    EXPECT_EQ(::kvfold::testing::HttpCall(port, "GET", "/throw").status, 500);
  }
  EXPECT_EQ(::kvfold::testing::HttpCall(port, "GET", "/x").status, 200);
}

// Waits up to 5 s for the server's open connections to reach `n`.
bool WaitForConnections(const HttpServer& server, size_t n) {
  for (int i = 0; i < 500 && server.open_connections() != n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return server.open_connections() == n;
}

// A connection that sends no header within header_timeout is closed, and so is a
// keep-alive connection idle that long after its answer: silent clients cannot hold the
// connection slots.
TEST(HttpServerTest, SilentAndIdleConnectionsCloseAfterTheHeaderTimeout) {
  HttpServerOptions options;
  options.header_timeout = std::chrono::milliseconds(300);
  auto server = HttpServer::Start(options, [](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    ex->Respond(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  const int silent = ConnectLoopback(port);
  ASSERT_GE(silent, 0);
  HttpConnection idle(port);
  ASSERT_TRUE(idle.Send("GET", "/x", ""));
  EXPECT_EQ(idle.Read().status, 200);
  ASSERT_TRUE(WaitForConnections(**server, 0));  // both closed by the server
  char byte;
  EXPECT_EQ(recv(silent, &byte, 1, 0), 0);  // the silent client sees the close
  close(silent);
  options.header_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(HttpServer::Start(options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HttpServerTest, ConnectionsOverTheLimitAre503AndTheServerRecovers) {
  HttpServerOptions options;
  options.max_connections = 2;
  auto server = HttpServer::Start(options, [](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    ex->Respond(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  EXPECT_EQ((*server)->max_connections(), 2u);
  EXPECT_GE(DefaultMaxConnections(), 16u);
  auto idle_a = std::make_unique<HttpConnection>(port);
  HttpConnection idle_b(port);
  ASSERT_TRUE(WaitForConnections(**server, 2));
  // The third connection gets the busy answer (the client's request read and dropped,
  // so the answer arrives before the close), and nothing reaches the handler.
  const auto refused = ::kvfold::testing::HttpCall(port, "GET", "/x");
  EXPECT_EQ(refused.status, 503);
  EXPECT_THAT(refused.body, HasSubstr("too many open connections"));
  EXPECT_EQ((*server)->refused_connections(), 1u);
  // A connection that closes makes room.
  idle_a.reset();
  ASSERT_TRUE(WaitForConnections(**server, 1));
  EXPECT_EQ(::kvfold::testing::HttpCall(port, "GET", "/x").status, 200);
  EXPECT_EQ((*server)->refused_connections(), 1u);
}

// When the process runs out of descriptors, accept() fails at once for every queued
// connection: the acceptor must wait between tries, not spin on the I/O threads (it used
// to burn 1.4 CPU seconds a second here), and serve again once descriptors are free.
TEST(HttpServerTest, OutOfDescriptorsTheAcceptorWaitsInsteadOfSpinning) {
  auto server = HttpServer::Start({}, [](HttpRequest, std::shared_ptr<HttpExchange> ex) {
    ex->Respond(200, "text/plain", "ok");
  });
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  double cpu = 0;
  size_t connected = 0;
  {
    // Connect until the process has no descriptor left: the kernel queues the last
    // connections, which the server then cannot accept.
    ScopedDescriptorLimit limit(21);
    ASSERT_TRUE(limit.ok());
    const std::vector<int> sockets = SilentConnections(port, 100);
    connected = sockets.size();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double cpu_start = ProcessCpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    cpu = ProcessCpuSeconds() - cpu_start;
    for (int fd : sockets) close(fd);
  }
  EXPECT_GE(connected, 10u);
  EXPECT_LT(cpu, 0.2) << "CPU seconds in one second out of descriptors";
  EXPECT_EQ(::kvfold::testing::HttpCall(port, "GET", "/x").status, 200);
}

}  // namespace
}  // namespace kvfold::http
