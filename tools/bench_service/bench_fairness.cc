#include "tools/bench_service/bench_fairness.h"

#include <grpcpp/create_channel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/bench_service/bench_grpc.h"

namespace kvfold::bench {
namespace {

using json = nlohmann::json;

// A short session is replaced after this many turns (8 + 8 tokens each).
constexpr int kTurnsPerSession = 8;
constexpr int kShortPromptTokens = 8;
constexpr int kShortNewTokens = 8;

struct Sample {
  double client_ms = 0;
  v1::Timings timings;
};

// The short turns' sessions, one client thread each; turn numbers continue across windows.
class ShortSessions {
 public:
  ShortSessions(v1::InferenceService::Stub& stub, std::string label, int sessions, int vocab)
      : stub_(stub), label_(std::move(label)), next_turn_(sessions, 0), vocab_(vocab) {}

  // `turns` turns per session and for at least `seconds`, or until *stop (a turn that
  // ends after it is not counted).
  std::vector<Sample> Run(int turns, double seconds, const std::atomic<bool>* stop) {
    std::vector<std::vector<Sample>> per(next_turn_.size());
    std::vector<std::thread> threads;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(seconds));
    auto more = [&](int n) {
      if (stop != nullptr) return !stop->load();
      return n < turns || std::chrono::steady_clock::now() < until;
    };
    for (size_t i = 0; i < next_turn_.size(); ++i) {
      threads.emplace_back([&, i] {
        for (int n = 0; more(n); ++n) {
          const int t = next_turn_[i]++;
          const std::string id = absl::StrCat(label_, "-s", i, "-", t / kTurnsPerSession);
          if (t % kTurnsPerSession == 0 && !Create(stub_, id, v1::KV_MODE_FULL)) return;
          const Turn turn = Generate(stub_, id, RandomIds(kShortPromptTokens, vocab_, 1000 * i + t),
                                     kShortNewTokens);
          if (turn.ok && (stop == nullptr || !stop->load())) {
            per[i].push_back({turn.total_ms, turn.usage.timings()});
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    std::vector<Sample> all;
    for (const auto& v : per) all.insert(all.end(), v.begin(), v.end());
    return all;
  }

 private:
  v1::InferenceService::Stub& stub_;
  const std::string label_;
  std::vector<int> next_turn_;
  const int vocab_;
};

std::vector<double> ClientMs(const std::vector<Sample>& samples) {
  std::vector<double> ms;
  for (const Sample& s : samples) ms.push_back(s.client_ms);
  return ms;
}

// Where the server says a short turn's time went (medians).
json ServerPercentiles(const std::vector<Sample>& samples, double q) {
  std::vector<double> queue, prefill, decode, checkpoint, total;
  for (const Sample& s : samples) {
    queue.push_back(s.timings.queue_ms());
    prefill.push_back(s.timings.restore_ms() + s.timings.prefill_ms());
    decode.push_back(s.timings.decode_ms());
    checkpoint.push_back(s.timings.checkpoint_ms());
    total.push_back(s.timings.total_ms());
  }
  return {{"queue_ms", Percentile(queue, q)},
          {"restore_prefill_ms", Percentile(prefill, q)},
          {"decode_ms", Percentile(decode, q)},
          {"checkpoint_ms", Percentile(checkpoint, q)},
          {"server_total_ms", Percentile(total, q)}};
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

json BenchFairness(service::InferenceServer& server, const FairnessOptions& options,
                   const std::string& label) {
  auto stub = v1::InferenceService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  const int vocab = static_cast<int>(server.engine().config().vocab_size);
  ShortSessions shorts(*stub, label, options.sessions, vocab);
  (void)shorts.Run(2, 0, nullptr);  // warm-up
  std::vector<Sample> all_alone, all_with;
  std::vector<double> ratios;
  json rounds = json::array();
  bool ok = true;
  for (int round = 0; round < options.rounds; ++round) {
    const std::vector<Sample> alone = shorts.Run(options.turns, options.alone_seconds, nullptr);
    const std::string long_id = absl::StrCat(label, "-long-", round);
    ok = Create(*stub, long_id, v1::KV_MODE_FULL) && ok;
    std::atomic<bool> long_done{false};
    Turn long_turn;
    std::thread long_thread([&] {
      long_turn = Generate(*stub, long_id, RandomIds(options.long_prompt_tokens, vocab, 5 + round), 1);
      long_done.store(true);
    });
    const std::vector<Sample> with_long = shorts.Run(0, 0, &long_done);
    long_thread.join();
    ok = ok && long_turn.ok && !with_long.empty();
    const std::vector<double> a = ClientMs(alone), w = ClientMs(with_long);
    const double ratio = Ratio(Percentile(w, 0.99), Percentile(a, 0.99));
    ratios.push_back(ratio);
    rounds.push_back({{"p50_alone_ms", Percentile(a, 0.5)},
                      {"p99_alone_ms", Percentile(a, 0.99)},
                      {"p50_with_long_ms", Percentile(w, 0.5)},
                      {"p99_with_long_ms", Percentile(w, 0.99)},
                      {"p99_ratio", ratio},
                      {"short_turns_alone", a.size()},
                      {"short_turns_with_long", w.size()},
                      {"long_prompt_ms", long_turn.total_ms}});
    std::fprintf(stderr,
                 "fairness %s round %d: p99 %.1f ms alone, %.1f ms with a %d-token prompt "
                 "(%.2fx; p50 %.1f vs %.1f ms; long prompt %.1f s)\n",
                 label.c_str(), round, Percentile(a, 0.99), Percentile(w, 0.99),
                 options.long_prompt_tokens, ratio, Percentile(a, 0.5), Percentile(w, 0.5),
                 long_turn.total_ms / 1000);
    all_alone.insert(all_alone.end(), alone.begin(), alone.end());
    all_with.insert(all_with.end(), with_long.begin(), with_long.end());
  }
  const std::vector<double> a = ClientMs(all_alone), w = ClientMs(all_with);
  json row;
  row["long_prompt_tokens"] = options.long_prompt_tokens;
  row["sessions"] = options.sessions;
  row["alone_seconds"] = options.alone_seconds;
  row["rounds"] = rounds;
  row["median_p99_ratio"] = Percentile(ratios, 0.5);
  row["p50_alone_ms"] = Percentile(a, 0.5);
  row["p99_alone_ms"] = Percentile(a, 0.99);
  row["p50_with_long_ms"] = Percentile(w, 0.5);
  row["p99_with_long_ms"] = Percentile(w, 0.99);
  row["pooled_p99_ratio"] = Ratio(Percentile(w, 0.99), Percentile(a, 0.99));
  row["server_p50_alone"] = ServerPercentiles(all_alone, 0.5);
  row["server_p50_with_long"] = ServerPercentiles(all_with, 0.5);
  row["server_p99_alone"] = ServerPercentiles(all_alone, 0.99);
  row["server_p99_with_long"] = ServerPercentiles(all_with, 0.99);
  row["ok"] = ok;
  return row;
}

}  // namespace kvfold::bench
