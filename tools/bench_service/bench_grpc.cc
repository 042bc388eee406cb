#include "tools/bench_service/bench_grpc.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>

namespace kvfold::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

bool Create(v1::InferenceService::Stub& stub, const std::string& id, v1::KvMode mode) {
  grpc::ClientContext context;
  v1::CreateSessionRequest request;
  request.set_session_id(id);
  request.mutable_config()->set_mode(mode);
  v1::Session session;
  grpc::Status s = stub.CreateSession(&context, request, &session);
  if (!s.ok()) std::fprintf(stderr, "create %s: %s\n", id.c_str(), s.error_message().c_str());
  return s.ok();
}

Turn Generate(v1::InferenceService::Stub& stub, const std::string& id,
              const std::vector<int32_t>& prompt, int max_new, const Clock::time_point* epoch,
              const v1::SamplingParams& sampling) {
  grpc::ClientContext context;
  v1::GenerateRequest request;
  request.set_session_id(id);
  for (int32_t t : prompt) request.add_prompt_token_ids(t);
  *request.mutable_sampling() = sampling;
  request.mutable_sampling()->set_max_new_tokens(max_new);
  request.mutable_sampling()->set_ignore_eos(true);
  const auto start = Clock::now();
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  Turn t;
  while (reader->Read(&response)) {
    if (response.has_delta()) {
      if (t.tokens == 0) t.ttft_ms = Ms(start, Clock::now());
      t.tokens += response.delta().token_ids_size();
      if (epoch != nullptr) {
        t.arrivals_ms.insert(t.arrivals_ms.end(), response.delta().token_ids_size(),
                             Ms(*epoch, Clock::now()));
        t.arrivals_cpu_s.insert(t.arrivals_cpu_s.end(), response.delta().token_ids_size(),
                                ProcessCpuSeconds());
      }
    } else {
      t.usage = response.final().usage();
    }
  }
  grpc::Status s = reader->Finish();
  t.total_ms = Ms(start, Clock::now());
  t.ok = s.ok();
  if (!s.ok()) std::fprintf(stderr, "generate %s: %s\n", id.c_str(), s.error_message().c_str());
  return t;
}

std::vector<int32_t> RandomIds(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(3 + rng() % static_cast<uint64_t>(vocab - 3));
  return ids;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace kvfold::bench
