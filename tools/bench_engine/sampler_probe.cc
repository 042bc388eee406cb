#include "tools/bench_engine/sampler_probe.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "inference_svc/engine/sampler.h"
#include "tools/bench_stats.h"

namespace kvfold::bench {
namespace {

using engine::SamplingParams;

// Median over five runs of the microseconds one Sample call takes.
double UsPerToken(const SamplingParams& params, const std::vector<std::vector<float>>& rows,
                  int vocab, int calls) {
  std::vector<int32_t> context(200);
  for (size_t i = 0; i < context.size(); ++i) context[i] = static_cast<int32_t>((i * 97) % vocab);
  std::vector<double> runs;
  int64_t sink = 0;
  for (int run = 0; run < 5; ++run) {
    engine::Sampler sampler(vocab, params);
    sampler.AddContext(context);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) sink += sampler.Sample(rows[i % rows.size()]);
    runs.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        calls);
  }
  if (sink == -1) runs.push_back(0);  // keeps the draws observable
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

// Median over five runs of the microseconds ComputeLogprobs takes for one token and its
// `top_n` alternatives.
double LogprobsUsPerToken(const std::vector<std::vector<float>>& rows, int top_n, int calls) {
  std::vector<double> runs;
  engine::TokenLogprobs out;
  double sink = 0;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      engine::ComputeLogprobs(rows[i % rows.size()], i % 7, top_n, &out);
      sink += out.logprob;
    }
    runs.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        calls);
  }
  if (sink == 1.5) runs.push_back(0);  // keeps the results observable
  return Median(runs);
}

}  // namespace

nlohmann::json SamplerProbe(int vocab, float sigma) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<std::vector<float>> rows(16, std::vector<float>(vocab));
  for (auto& row : rows) {
    for (float& l : row) l = normal(gen);
  }
  auto penalised = [](SamplingParams p) {
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.5f;
    p.repetition_penalty = 1.1f;
    return p;
  };
  SamplingParams greedy;
  SamplingParams biased = greedy;
  biased.logit_bias = {{5, -100.0f}, {77, 3.0f}};
  SamplingParams temperature;
  temperature.temperature = 0.8f;
  SamplingParams top_k = temperature;
  top_k.top_k = 40;
  SamplingParams top_p = temperature;
  top_p.top_p = 0.9f;
  SamplingParams min_p = top_p;
  min_p.min_p = 0.05f;
  const std::vector<std::pair<std::string, SamplingParams>> settings = {
      {"greedy", greedy},
      {"greedy_penalties", penalised(greedy)},
      {"greedy_logit_bias", biased},
      {"temperature", temperature},
      {"top_k_40", top_k},
      {"top_p_0.9", top_p},
      {"top_p_0.9_penalties", penalised(top_p)},
      {"top_p_0.9_min_p_0.05", min_p}};
  nlohmann::json us = nlohmann::json::object();
  for (const auto& [name, params] : settings) {
    us[name] = UsPerToken(params, rows, vocab, params.temperature > 0 ? 200 : 4000);
  }
  us["logprobs_top_5"] = LogprobsUsPerToken(rows, 5, 200);
  return {{"vocab", vocab}, {"sigma", sigma}, {"us_per_token", us}};
}

}  // namespace kvfold::bench
