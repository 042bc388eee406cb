#include "tools/bench_engine/batch_decode.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>

#include "inference_svc/engine/sampler.h"
#include "tools/bench_stats.h"

namespace kvfold::bench {
namespace {

using Clock = std::chrono::steady_clock;

double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

struct Round {
  double wall_s = 0, cpu_s = 0;
};

// One round of `n` sequences: a ragged prefill of the prompts, one untimed step, then
// `steps` timed steps of n rows. The caches are dropped at the end (blocks back to the pool).
absl::StatusOr<Round> RunRound(engine::Engine& engine, int n, const BatchDecodeOptions& o,
                               engine::ForwardResult* result) {
  const int vocab = engine.config().vocab_size;
  std::vector<std::unique_ptr<engine::KvCache>> caches;
  std::vector<std::vector<int32_t>> prompts(n);
  std::vector<engine::SequenceInput> inputs(n);
  for (int i = 0; i < n; ++i) {
    caches.push_back(engine.NewCache(engine::KvPolicy::Full()));
    for (int t = 0; t < o.prompt_tokens; ++t) {
      prompts[i].push_back(1 + (i * 7919 + t * 104729) % (vocab - 1));
    }
    inputs[i].cache = caches[i].get();
    inputs[i].token_ids = prompts[i];
  }
  if (absl::Status s = engine.Forward(inputs, result); !s.ok()) return s;
  std::vector<int32_t> next(n);
  auto feed = [&] {
    for (int i = 0; i < n; ++i) {
      next[i] = engine::Argmax(result->outputs[i].logits);
      inputs[i].token_ids = std::span<const int32_t>(&next[i], 1);
    }
  };
  feed();
  if (absl::Status s = engine.Forward(inputs, result); !s.ok()) return s;  // warm-up
  feed();
  Round r;
  const auto t0 = Clock::now();
  const double c0 = CpuSeconds();
  for (int step = 0; step < o.steps; ++step) {
    if (absl::Status s = engine.Forward(inputs, result); !s.ok()) return s;
    feed();
  }
  r.cpu_s = CpuSeconds() - c0;
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace

nlohmann::json BenchBatchDecode(engine::Engine& engine, const BatchDecodeOptions& o) {
  if (o.sizes.empty() || o.steps <= 0 || o.rounds <= 0 || o.prompt_tokens <= 0) {
    return {{"error", "batch decode needs sizes, steps, rounds and prompt tokens > 0"}};
  }
  engine::ForwardResult result;
  std::vector<std::vector<double>> wall(o.sizes.size()), cpu(o.sizes.size());
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t k = 0; k < o.sizes.size(); ++k) {
      absl::StatusOr<Round> r = RunRound(engine, o.sizes[k], o, &result);
      if (!r.ok()) return {{"error", r.status().ToString()}};
      wall[k].push_back(r->wall_s);
      cpu[k].push_back(r->cpu_s);
    }
  }
  nlohmann::json sizes = nlohmann::json::array();
  double one_wall = 0, one_cpu = 0;
  for (size_t k = 0; k < o.sizes.size(); ++k) {
    const int n = o.sizes[k];
    const double w = Median(wall[k]), c = std::max(1e-9, Median(cpu[k]));
    const double tok_s = n * o.steps / w, tok_cpu_s = n * o.steps / c;
    nlohmann::json row = {{"sequences", n},
                          {"decode_tok_s", tok_s},
                          {"decode_tok_per_cpu_s", tok_cpu_s},
                          {"ms_per_step", 1000.0 * w / o.steps},
                          {"cpu_ms_per_step", 1000.0 * c / o.steps}};
    if (n == 1) {
      one_wall = tok_s;
      one_cpu = tok_cpu_s;
    }
    if (one_wall > 0) {
      row["over_one"] = tok_s / one_wall;
      row["over_one_cpu"] = tok_cpu_s / one_cpu;
    }
    sizes.push_back(row);
  }
  return {{"prompt_tokens", o.prompt_tokens},
          {"steps", o.steps},
          {"rounds", o.rounds},
          {"sizes", sizes}};
}

}  // namespace kvfold::bench
