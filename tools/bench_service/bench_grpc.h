// gRPC helpers shared by bench_service's tables: one session created, one turn streamed
// and timed at the client, random prompts, percentiles.
#ifndef KVFOLD_TOOLS_BENCH_SERVICE_BENCH_GRPC_H_
#define KVFOLD_TOOLS_BENCH_SERVICE_BENCH_GRPC_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kvfold/v1/inference.grpc.pb.h"

namespace kvfold::bench {

struct Turn {
  bool ok = false;
  int tokens = 0;
  double ttft_ms = 0, total_ms = 0;  // at the client
  v1::Usage usage;
  std::vector<double> arrivals_ms;  // each token's arrival, ms after `epoch` (when given)
  // The process's CPU seconds (all threads: engine, gRPC, clients) at each arrival.
  std::vector<double> arrivals_cpu_s;
};

// CPU seconds used by this process so far, all threads.
double ProcessCpuSeconds();

// CreateSession; prints the error and returns false on failure.
bool Create(v1::InferenceService::Stub& stub, const std::string& id, v1::KvMode mode);

// One Generate call with `prompt` ids, `max_new` tokens (EOS ignored), streamed to the end,
// greedy unless `sampling` says otherwise (its max_new_tokens and ignore_eos are set here).
// With `epoch`, each token's arrival time (and the process CPU time then) is recorded too.
Turn Generate(v1::InferenceService::Stub& stub, const std::string& id,
              const std::vector<int32_t>& prompt, int max_new,
              const std::chrono::steady_clock::time_point* epoch = nullptr,
              const v1::SamplingParams& sampling = v1::SamplingParams());

// `n` ids in [3, vocab), reproducible from `seed`.
std::vector<int32_t> RandomIds(int n, int vocab, uint64_t seed);

// The q-quantile (nearest rank) of `v`; 0 when empty.
double Percentile(std::vector<double> v, double q);

}  // namespace kvfold::bench

#endif  // KVFOLD_TOOLS_BENCH_SERVICE_BENCH_GRPC_H_
