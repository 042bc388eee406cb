// HttpServer on loopback: keep-alive requests, chunked event streams written from other
// threads, the client-gone callback when a client leaves mid-stream, oversized bodies.
#include "inference_svc/http/http_server.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/http_client.h"

namespace kvfold::http {
namespace {

using ::kvfold::testing::HttpCall;
using ::kvfold::testing::HttpConnection;
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

}  // namespace
}  // namespace kvfold::http
