// bench_service's HTTP rows (bench_http.h): the OpenAI HTTP path against the gRPC path on
// one replica, and many idle event streams held at once.
#include "tools/bench_service/bench_http.h"

#include <grpcpp/create_channel.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvfold::bench {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;

// The middle value (the upper one of an even count); `v` not empty.
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// /proc/self/status field in kB or count ("VmRSS", "Threads").
int64_t ProcStatus(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  }
  return -1;
}

// `n` > 1: that many choices in one ephemeral request (`session` empty).
std::string ChatBody(const std::string& session, int max_tokens, bool stream, int n = 1) {
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story about a cat."}}}},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"stream", stream}};
  if (!session.empty()) body["kvfold_session"] = session;
  if (n > 1) body["n"] = n;
  if (stream) body["stream_options"] = {{"include_usage", true}};
  return body.dump();
}

std::string RequestText(int port, const std::string& body,
                        const std::string& target = "/v1/chat/completions") {
  bhttp::request<bhttp::string_body> req(bhttp::verb::post, target, 11);
  req.set(bhttp::field::host, absl::StrCat("127.0.0.1:", port));
  req.set(bhttp::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  std::ostringstream ss;
  ss << req;
  return ss.str();
}

// One request's answer body when its status is 200; nullopt otherwise.
std::optional<std::string> HttpExchange(int port, const std::string& request) {
  net::io_context io;
  net::ip::tcp::socket socket(io);
  beast::error_code ec;
  socket.connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
  if (ec) return std::nullopt;
  net::write(socket, net::buffer(request), ec);
  if (ec) return std::nullopt;
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 << 20);
  bhttp::read(socket, buffer, parser, ec);
  if (ec || parser.get().result_int() != 200) return std::nullopt;
  return std::move(parser.get().body());
}

// The completion tokens of an answer's usage, -1 when there is none.
int CompletionTokens(const std::optional<std::string>& body) {
  if (!body.has_value()) return -1;
  const size_t at = body->rfind("\"completion_tokens\":");
  return at == std::string::npos ? -1 : std::atoi(body->c_str() + at + 20);
}

// One chat completion (streamed, or `n` choices in one answer); returns the completion
// tokens (usage), -1 on failure.
int HttpTurn(int port, const std::string& session, int max_tokens, bool stream, int n) {
  return CompletionTokens(
      HttpExchange(port, RequestText(port, ChatBody(session, max_tokens, stream, n))));
}

// One sampled completion of `prompt` (token ids) with `n` choices and `seed`; returns the
// completion tokens, -1 on failure.
// `format`: a response_format, or null for free text.
int CompletionTurn(int port, const std::vector<int32_t>& prompt, int max_tokens, int n,
                   uint64_t seed, const json& format = nullptr) {
  json body = {{"prompt", prompt},   {"max_tokens", max_tokens},
               {"temperature", 1.0}, {"ignore_eos", true},
               {"seed", seed},       {"n", n}};
  if (!format.is_null()) body["response_format"] = format;
  return CompletionTokens(HttpExchange(port, RequestText(port, body.dump(), "/v1/completions")));
}

int HttpStreamTurn(int port, const std::string& session, int max_tokens) {
  return HttpTurn(port, session, max_tokens, /*stream=*/true, 1);
}

// The same turn through gRPC's chat form; returns the generated tokens, -1 on failure.
int GrpcChatTurn(v1::InferenceService::Stub& stub, const std::string& session, int max_tokens) {
  grpc::ClientContext context;
  v1::GenerateRequest request;
  request.set_session_id(session);
  v1::ChatMessage* m = request.add_messages();
  m->set_role("user");
  m->set_content("Tell me a story about a cat.");
  request.mutable_sampling()->set_max_new_tokens(max_tokens);
  request.mutable_sampling()->set_top_k(1);
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  int tokens = 0;
  while (reader->Read(&response)) tokens += response.delta().token_ids_size();
  return reader->Finish().ok() ? tokens : -1;
}

bool CreateSession(v1::InferenceService::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  v1::CreateSessionRequest request;
  request.set_session_id(id);
  v1::Session session;
  return stub.CreateSession(&context, request, &session).ok();
}

// Aggregate tok/s of `streams` concurrent turns, each on its own fresh session;
// `*tokens` receives the tokens generated.
double Throughput(int streams, const std::function<int(int)>& turn, int* failures,
                  int* tokens_out) {
  std::vector<int> tokens(streams, 0);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int i = 0; i < streams; ++i) threads.emplace_back([&, i] { tokens[i] = turn(i); });
  for (auto& t : threads) t.join();
  const double seconds = Seconds(start, Clock::now());
  int total = 0;
  for (int t : tokens) {
    if (t < 0) ++*failures;
    total += std::max(t, 0);
  }
  *tokens_out = total;
  return total / seconds;
}

}  // namespace

json BenchHttpVsGrpc(service::InferenceServer& server, int streams, int new_tokens, int rounds) {
  auto stub = v1::InferenceService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  const int port = server.http_port();
  int failures = 0;
  int session_counter = 0;
  auto fresh = [&](const std::string& prefix) {
    std::vector<std::string> ids;
    for (int i = 0; i < streams; ++i) {
      ids.push_back(absl::StrCat(prefix, session_counter++));
      if (!CreateSession(*stub, ids.back())) ++failures;
    }
    return ids;
  };
  // Warm-up on both paths.
  auto warm = fresh("warm-");
  (void)GrpcChatTurn(*stub, warm[0], 8);
  (void)HttpStreamTurn(port, warm[1 % streams], 8);
  std::vector<double> grpc_tok_s, http_tok_s, choices_tok_s;
  int grpc_tokens = 0, http_tokens = 0, choices_tokens = 0;  // per round (the same prompts)
  for (int round = 0; round < rounds; ++round) {  // interleaved: load drifts hit both alike
    auto g = fresh("grpc-");
    grpc_tok_s.push_back(Throughput(
        streams, [&](int i) { return GrpcChatTurn(*stub, g[i], new_tokens); }, &failures,
        &grpc_tokens));
    auto h = fresh("http-");
    http_tok_s.push_back(Throughput(
        streams, [&](int i) { return HttpStreamTurn(port, h[i], new_tokens); }, &failures,
        &http_tokens));
    choices_tok_s.push_back(Throughput(
        1, [&](int) { return HttpTurn(port, "", new_tokens, /*stream=*/false, streams); },
        &failures, &choices_tokens));
  }
  json row = {{"streams", streams},
              {"new_tokens_per_stream", new_tokens},
              {"rounds", rounds},
              {"grpc_tok_s", Median(grpc_tok_s)},
              {"http_tok_s", Median(http_tok_s)},
              {"http_n_choices_tok_s", Median(choices_tok_s)},
              {"grpc_tokens_per_round", grpc_tokens},
              {"http_tokens_per_round", http_tokens},
              {"http_n_choices_tokens_per_round", choices_tokens},
              {"failures", failures}};
  row["http_over_grpc"] = row["http_tok_s"].get<double>() / row["grpc_tok_s"].get<double>();
  row["n_choices_over_http_streams"] =
      row["http_n_choices_tok_s"].get<double>() / row["http_tok_s"].get<double>();
  return row;
}

// A prompt of `n` token ids for round `round` and use `salt` (< 8): a BOS, then ids whose
// second differs from every other (round, salt)'s, so no two share more than the BOS.
static std::vector<int32_t> RoundPrompt(service::InferenceServer& server, int round, int salt,
                                        int n) {
  const int vocab = server.engine().config().vocab_size;
  std::vector<int32_t> ids = {server.engine().config().bos_token_id};
  const int64_t key = (int64_t{round} + 1) * 8 + salt;
  for (int i = 1; i < n; ++i)
    ids.push_back(static_cast<int32_t>(3 + (key * 7919 + 31 * i) % (vocab - 3)));
  return ids;
}

json BenchSharedPrompt(service::InferenceServer& server, int choices, int prompt_tokens,
                       int new_tokens, int rounds) {
  const int port = server.http_port();
  int failures = 0, tokens = 0;
  (void)CompletionTurn(port, RoundPrompt(server, -1, 0, prompt_tokens), 4, 1, 1);  // warm-up
  std::vector<double> one_request_s, separate_s;
  double copies = 0;
  for (int round = 0; round < rounds; ++round) {  // interleaved: load drifts hit both alike
    // Prompts no request fed before (so the prefix cache has none of them).
    const std::vector<int32_t> shared = RoundPrompt(server, round, 0, prompt_tokens);
    const std::vector<int32_t> separate = RoundPrompt(server, round, 1, prompt_tokens);
    const uint64_t copies_before = server.runtime().scheduler().prompt_copies();
    auto start = Clock::now();
    if (CompletionTurn(port, shared, new_tokens, choices, 100) < 0) ++failures;
    one_request_s.push_back(Seconds(start, Clock::now()));
    copies += static_cast<double>(server.runtime().scheduler().prompt_copies() - copies_before);
    start = Clock::now();
    (void)Throughput(
        choices, [&](int i) { return CompletionTurn(port, separate, new_tokens, 1, 100 + i); },
        &failures, &tokens);
    separate_s.push_back(Seconds(start, Clock::now()));
  }
  json row = {{"choices", choices},
              {"prompt_tokens", prompt_tokens},
              {"new_tokens_per_choice", new_tokens},
              {"rounds", rounds},
              {"one_request_s", Median(one_request_s)},
              {"separate_requests_s", Median(separate_s)},
              {"prompt_copies_per_request", copies / rounds},
              {"failures", failures}};
  row["separate_over_one_request"] =
      row["separate_requests_s"].get<double>() / row["one_request_s"].get<double>();
  return row;
}

json BenchPrefixCache(service::InferenceServer& server, int prompt_tokens, int rounds) {
  const int port = server.http_port();
  const runtime::Scheduler& sched = server.runtime().scheduler();
  auto prompt = [&](int r, int salt, int n) { return RoundPrompt(server, r, 2 + salt, n); };
  auto with_tail = [](std::vector<int32_t> ids) {
    for (int i = 0; i < 8; ++i) ids.push_back(3 + i);
    return ids;
  };
  int failures = 0;
  std::vector<double> warm_s, cold_s;
  uint64_t cached = 0;
  for (int round = 0; round < rounds; ++round) {  // interleaved
    const std::vector<int32_t> seen = prompt(round, 0, prompt_tokens);
    if (CompletionTurn(port, seen, 1, 1, 1) < 0) ++failures;  // the replica keeps it
    const uint64_t tokens_before = sched.prefix_cache_tokens();
    auto start = Clock::now();
    if (CompletionTurn(port, with_tail(seen), 1, 1, 2) < 0) ++failures;
    warm_s.push_back(Seconds(start, Clock::now()));
    cached += sched.prefix_cache_tokens() - tokens_before;
    start = Clock::now();
    if (CompletionTurn(port, with_tail(prompt(round, 1, prompt_tokens)), 1, 1, 2) < 0) ++failures;
    cold_s.push_back(Seconds(start, Clock::now()));
  }
  json row = {{"prompt_tokens", prompt_tokens + 8},
              {"cached_tokens_per_request", static_cast<double>(cached) / rounds},
              {"rounds", rounds},
              {"warm_s", Median(warm_s)},
              {"cold_s", Median(cold_s)},
              {"failures", failures}};
  row["cold_over_warm"] = row["cold_s"].get<double>() / row["warm_s"].get<double>();
  return row;
}

json BenchStructured(service::InferenceServer& server, int streams, int new_tokens, int rounds) {
  const int port = server.http_port();
  const runtime::Scheduler& sched = server.runtime().scheduler();
  // One long string field: the document stays open for most of the tokens.
  const json format = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "story"},
        {"schema",
         {{"type", "object"},
          {"properties", {{"title", {{"type", "string"}}}, {"story", {{"type", "string"}}}}},
          {"required", {"title", "story"}}}}}}};
  const std::vector<int32_t> prompt = RoundPrompt(server, 1000, 7, 16);
  int failures = 0, free_tokens = 0, structured_tokens = 0;
  (void)CompletionTurn(port, prompt, 4, 1, 1, format);  // warm-up
  std::vector<double> free_tok_s, structured_tok_s, mask_us;
  for (int round = 0; round < rounds; ++round) {  // interleaved
    free_tok_s.push_back(Throughput(
        streams, [&](int i) { return CompletionTurn(port, prompt, new_tokens, 1, 10 + i); },
        &failures, &free_tokens));
    const double mask_s = sched.structured_mask_seconds();
    const uint64_t masked = sched.structured_tokens();
    structured_tok_s.push_back(Throughput(
        streams, [&](int i) { return CompletionTurn(port, prompt, new_tokens, 1, 10 + i, format); },
        &failures, &structured_tokens));
    mask_us.push_back(1e6 * (sched.structured_mask_seconds() - mask_s) /
                      std::max<double>(1, static_cast<double>(sched.structured_tokens() - masked)));
  }
  json row = {{"streams", streams},
              {"max_tokens_per_stream", new_tokens},
              {"rounds", rounds},
              {"free_tok_s", Median(free_tok_s)},
              {"structured_tok_s", Median(structured_tok_s)},
              {"free_tokens_per_round", free_tokens},
              {"structured_tokens_per_round", structured_tokens},
              {"mask_us_per_token", Median(mask_us)},
              {"failures", failures}};
  row["structured_over_free"] =
      row["structured_tok_s"].get<double>() / row["free_tok_s"].get<double>();
  return row;
}

json BenchIdleStreams(service::InferenceServer& server, int streams) {
  // One descriptor per client socket and per server connection, plus gRPC's.
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  const int port = server.http_port();
  const int64_t threads_before = ProcStatus("Threads");
  const int64_t rss_before_kb = ProcStatus("VmRSS");
  // All clients on this one thread: requests written, answers never read while held.
  net::io_context io;
  std::vector<std::unique_ptr<net::ip::tcp::socket>> sockets;
  int opened = 0;
  for (int i = 0; i < streams; ++i) {
    auto socket = std::make_unique<net::ip::tcp::socket>(io);
    beast::error_code ec;
    socket->connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
    if (ec) continue;
    // Ephemeral chats of 512 tokens (their KV reservations fit the pool together): most
    // wait for the scheduler, every stream stays open.
    net::write(*socket, net::buffer(RequestText(port, ChatBody("", 512, true))), ec);
    if (ec) continue;
    sockets.push_back(std::move(socket));
    ++opened;
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t threads_held = ProcStatus("Threads");
  const int64_t rss_held_kb = ProcStatus("VmRSS");
  const size_t connections = server.http_open_connections();
  for (auto& s : sockets) {  // leaving cancels the turns
    beast::error_code ec;
    s->close(ec);
  }
  sockets.clear();
  return {{"streams_requested", streams},
          {"streams_open", opened},
          {"server_http_connections", connections},
          {"threads_before", threads_before},
          {"threads_with_streams_open", threads_held},
          {"rss_mib_before", rss_before_kb / 1024.0},
          {"rss_mib_with_streams_open", rss_held_kb / 1024.0},
          {"rss_kib_per_stream", opened > 0 ? double(rss_held_kb - rss_before_kb) / opened : 0.0}};
}

}  // namespace kvfold::bench
