// bench_engine: prefill and decode throughput of the engine per KV mode and context, with
// the machine's memory bandwidth (STREAM-like copy) and the decode roofline beside each
// figure, plus our batch-invariant GEMM against OpenBLAS (and on weights 28 bytes past a
// cache line). Prints one JSON document.
//
//   bench_engine [--stories PATH] [--no-big] [--quick] [--threads N]
//                [--contexts 128,1024,4096,16384] [--decode-steps N] [--window 1024]
//                [--kv-dtypes f32,f16,int8] [--modes full,sliding,sink] [--no-gemm]
//                [--batch-sizes 1,16] [--batch-rounds 3] [--batch-prompt-tokens 8]
//                [--prefill-pieces N]
//   bench_engine --isa-probe
//   bench_engine --sampler-probe [--sampler-vocab 32000] [--sampler-sigma 3]
//
// --stories takes any model LoadModel reads (llama2.c file or HF directory, e.g. a
// `kvfold convert --dtype q8` output).
//
// Decode at context C: the cache holds C tokens (a real prefill when C <= the prefill cap,
// otherwise synthetic zero K/V appended directly: decode speed does not depend on the
// values), then `decode-steps` single-token steps are timed. Roofline = bandwidth / bytes
// read per token (all weights once + the K/V of the entries the token attends to), for
// the copy bandwidth, the read-only bandwidth and the STREAM triad bandwidth.
// With several --kv-dtypes every row is measured for each KV cache type, the types
// alternating row by row, and "kv_dtype_ratios" puts each of the others beside f32
// (prefill and decode tok per CPU-second, bytes per token).
// INT8 rows use real prefills only (synthetic K/V would skip the quantizer).
// --batch-sizes adds "batch_decode" for the --stories model: N sequences decoding in one
// Forward per step, beside one (batch_decode.h), over the first --kv-dtypes cache type.
// --prefill-pieces adds "prefill_pieces": the time of every piece of an N-token full-mode prompt
// fed as the scheduler feeds it, per band of context (prefill_pieces.h).
// --scoring-prefill N adds "scoring_prefill": an N-token prompt prefilled plain and scored
// (every row's log-probabilities), alternated (scoring_prefill.h).
// --isa-probe prints only what one core sustains on the kernels' instructions beside the
// 16-row Q8 MatMul (isa_probe.h), and exits; --sampler-probe only what the sampler costs a
// token per setting (sampler_probe.h).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/command_line.h"
#include "core/kv_bytes.h"
#include "inference_svc/engine/engine.h"
#include "inference_svc/model/model_file.h"
#include "inference_svc/model/random_model.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tools/bench_cpu.h"
#include "tools/bench_engine/batch_decode.h"
#include "tools/bench_engine/isa_probe.h"
#include "tools/bench_engine/prefill_pieces.h"
#include "tools/bench_engine/sampler_probe.h"
#include "tools/bench_engine/scoring_prefill.h"
#ifdef KVFOLD_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace kvfold {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Process CPU seconds (all threads): on a shared machine, tokens per CPU-second is the
// figure that does not depend on what else runs.
double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

struct Bandwidth {
  double per_s = 0;      // bytes per wall second (best of 5)
  double per_cpu_s = 0;  // bytes per CPU second (best of 5): what one core's worth streams
  double read_per_s = 0;  // read-only streaming (a sum over 256 MiB), bytes per wall second
  double triad_per_s = 0;  // STREAM triad a = b + s * c (3 x 256 MiB), bytes per wall second
};

// Sum of n floats with 4 independent AVX2 accumulators: a read stream at full speed.
__attribute__((target("avx2"))) float SumAvx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

float SumPortable(const float* p, size_t n) {
  float acc[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += p[i + l];
  return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

// STREAM "copy" with all threads: bytes read + written, per wall and per CPU second; then
// a read-only stream (decode mostly reads).
Bandwidth MeasureBandwidth(int threads) {
  const size_t n = size_t{64} << 20;  // 64 Mi floats = 256 MiB per array
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  Bandwidth best;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t = Clock::now();
    const double cpu = CpuSeconds();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        const size_t begin = n * i / threads, end = n * (i + 1) / threads;
        std::memcpy(b.data() + begin, a.data() + begin, (end - begin) * sizeof(float));
      });
    }
    for (auto& th : pool) th.join();
    best.per_s = std::max(best.per_s, 2.0 * n * sizeof(float) / Since(t));
    best.per_cpu_s = std::max(best.per_cpu_s, 2.0 * n * sizeof(float) / std::max(1e-9, CpuSeconds() - cpu));
  }
  const bool avx2 = __builtin_cpu_supports("avx2");
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t = Clock::now();
    std::vector<std::thread> pool;
    std::vector<float> sums(threads);
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        const size_t begin = n * i / threads, end = n * (i + 1) / threads;
        sums[i] = avx2 ? SumAvx2(b.data() + begin, end - begin) : SumPortable(b.data() + begin, end - begin);
      });
    }
    for (auto& th : pool) th.join();
    best.read_per_s = std::max(best.read_per_s, 1.0 * n * sizeof(float) / Since(t));
    for (float v : sums) sink = sink + v;
  }
  (void)sink;
  // STREAM triad, counted as STREAM does: 2 arrays read + 1 written per element.
  std::vector<float> c(n, 2.0f);
  for (int rep = 0; rep < 5; ++rep) {
    const auto t = Clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        const size_t begin = n * i / threads, end = n * (i + 1) / threads;
        float* __restrict__ out = a.data();
        const float* __restrict__ x = b.data();
        const float* __restrict__ y = c.data();
        for (size_t j = begin; j < end; ++j) out[j] = x[j] + 3.0f * y[j];
      });
    }
    for (auto& th : pool) th.join();
    best.triad_per_s = std::max(best.triad_per_s, 3.0 * n * sizeof(float) / Since(t));
  }
  return best;
}

// kvfold's GEMM (best of 5) on 64-byte aligned weights, on the same weights 28 bytes past
// a line (where a llama2.c checkpoint puts them; the CPU backend copies such weights into
// aligned memory when it adopts them), and OpenBLAS's sgemm on the aligned ones.
json GemmVsOpenBlas(kernels::Backend& backend, int n, int m, int k) {
  constexpr size_t kOffsetFloats = 7;  // 28 bytes
  const size_t wn = static_cast<size_t>(m) * k;
  std::vector<float> x(static_cast<size_t>(n) * k), out(static_cast<size_t>(n) * m);
  std::unique_ptr<float, decltype(&std::free)> storage(
      static_cast<float*>(std::aligned_alloc(64, (wn + 16) * sizeof(float))), &std::free);
  float* w = storage.get();
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 13) * 0.01f;
  for (size_t i = 0; i < wn; ++i) w[i] = static_cast<float>((i * 5) % 11) * 0.01f;
  auto stream = backend.CreateStream();
  const double flops = 2.0 * n * m * k;
  auto time_best = [&](auto fn) {
    double best = 1e9;
    for (int r = 0; r < 5; ++r) {
      const auto t = Clock::now();
      fn();
      best = std::min(best, Since(t));
    }
    return best;
  };
  auto ours_on = [&](const float* weights) {
    return time_best([&] {
      (void)backend.MatMul(*stream, kernels::MakeTensor(x.data(), core::DType::kF32, {n, k}),
                           kernels::MakeTensor(const_cast<float*>(weights), core::DType::kF32, {m, k}),
                           kernels::Tensor(), kernels::MakeTensor(out.data(), core::DType::kF32, {n, m}));
    });
  };
  const double ours = ours_on(w);
  std::memmove(w + kOffsetFloats, w, wn * sizeof(float));
  const double unaligned = ours_on(w + kOffsetFloats);
  std::memmove(w, w + kOffsetFloats, wn * sizeof(float));
  json j = {{"n", n},
            {"m", m},
            {"k", k},
            {"kvfold_gflops", flops / ours / 1e9},
            {"kvfold_weights_28_bytes_past_a_line_gflops", flops / unaligned / 1e9}};
#ifdef KVFOLD_HAVE_OPENBLAS
  const double blas = time_best([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0f, x.data(), k, w, k,
                0.0f, out.data(), m);
  });
  j["openblas_gflops"] = flops / blas / 1e9;
  j["kvfold_over_openblas"] = blas / ours;
#endif
  return j;
}

struct Options {
  std::vector<int> contexts = {128, 1024, 4096, 16384};
  int decode_steps = 32;
  int window = 1024;
  int sink = 4;
  int max_prefill = 16384;
  // An untimed prefill of the same prompt on a throwaway cache before the timed one, as
  // llama-bench's warm-up prompt run: the timed prefill then finds its scratch buffers
  // allocated and their pages touched.
  bool prefill_warmup = false;
  core::DType kv_dtype = core::DType::kF32;
  std::vector<std::string> modes = {"full", "sliding", "sink"};
};

json BenchModel(const std::string& name, const model::ModelFile& m, kernels::Backend& backend,
                const Options& o, const Bandwidth& bw) {
  const double bandwidth = bw.per_s;
  const model::ModelConfig& c = m.config;
  engine::EngineOptions eo;
  eo.kv_dtype = o.kv_dtype;
  const int max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
  const size_t f32_per_token = size_t{4} * 2 * c.num_layers * c.kv_dim();
  const size_t kv_per_token =
      core::KvBytesPerToken({.num_layers = static_cast<uint64_t>(c.num_layers),
                             .kv_dim = static_cast<uint64_t>(c.kv_dim()),
                             .dtype = o.kv_dtype,
                             .block_size = static_cast<uint64_t>(eo.block_size),
                             .value_group = static_cast<uint64_t>(eo.kv_value_group)})
          .value_or(0);
  // Sized as for F32 so INT8's F32 pages for open blocks always fit.
  eo.kv_pool_bytes = f32_per_token * (max_ctx + 2 * o.decode_steps + 64) + (size_t{64} << 20);
  eo.rope_table_rows = max_ctx + 2 * o.decode_steps + 64;
  auto e = engine::Engine::Create(m, &backend, eo);
  if (!e.ok()) return {{"error", e.status().ToString()}};
  engine::Engine& engine = **e;
  size_t weight_bytes = 0;
  for (const auto& [tname, t] : m.tensors) {
    if (tname != "model.embed_tokens.weight" || c.tie_word_embeddings) weight_bytes += t.size_bytes;
  }
  json results = json::array();
  engine::ForwardResult result;
  for (const std::string& mode_s : o.modes) {
    const char* mode = mode_s.c_str();
    for (int ctx : o.contexts) {
      const engine::KvPolicy policy = mode_s == "full"      ? engine::KvPolicy::Full()
                                      : mode_s == "sliding" ? engine::KvPolicy::Sliding(o.window)
                                                            : engine::KvPolicy::Sink(o.sink, o.window - o.sink);
      auto cache = engine.NewCache(policy);
      std::vector<int32_t> ids(ctx);
      for (int i = 0; i < ctx; ++i) ids[i] = 1 + (i * 7919) % (c.vocab_size - 1);
      json row = {{"model", name}, {"kv_dtype", core::DTypeName(o.kv_dtype)}, {"mode", mode},
                  {"context", ctx}};
      if (ctx > o.max_prefill && o.kv_dtype == core::DType::kI8) continue;
      if (ctx <= o.max_prefill) {
        engine::SequenceInput in;
        in.token_ids = ids;
        if (o.prefill_warmup) {
          auto warm = engine.NewCache(policy);
          in.cache = warm.get();
          const absl::Status s = engine.Forward(std::span<const engine::SequenceInput>(&in, 1), &result);
          if (!s.ok()) return {{"error", s.ToString()}};
        }
        in.cache = cache.get();
        const auto t = Clock::now();
        const double cpu = CpuSeconds();
        const absl::Status s = engine.Forward(std::span<const engine::SequenceInput>(&in, 1), &result);
        if (!s.ok()) return {{"error", s.ToString()}};
        row["prefill_tok_s"] = ctx / Since(t);
        row["prefill_tok_per_cpu_s"] = ctx / std::max(1e-9, CpuSeconds() - cpu);
      } else {
        // Synthetic context: zero K/V entries appended without computing them.
        std::vector<int32_t> slots(ctx);
        const int keep = policy.window > 0 ? std::min(ctx, policy.window) : ctx;
        const int to_prefix = std::min(policy.auto_prefix_tokens, keep);
        if (!cache->AppendPrefix(to_prefix, slots.data()).ok() ||
            !cache->AppendMain(keep - to_prefix, slots.data()).ok()) {
          return {{"error", "KV pool too small"}};
        }
        row["prefill_tok_s"] = nullptr;
        row["context_filled"] = "synthetic";
      }
      const int32_t next = 5;
      engine::SequenceInput in;
      in.cache = cache.get();
      in.token_ids = std::span<const int32_t>(&next, 1);
      (void)engine.Forward(std::span<const engine::SequenceInput>(&in, 1), &result);  // warm-up
      const auto t = Clock::now();
      const double cpu = CpuSeconds();
      for (int i = 0; i < o.decode_steps; ++i) {
        const absl::Status s = engine.Forward(std::span<const engine::SequenceInput>(&in, 1), &result);
        if (!s.ok()) return {{"error", s.ToString()}};
      }
      const double decode = o.decode_steps / Since(t);
      const double decode_cpu = o.decode_steps / std::max(1e-9, CpuSeconds() - cpu);
      row["decode_tok_per_cpu_s"] = decode_cpu;
      const size_t attended = static_cast<size_t>(cache->resident_tokens());
      const double bytes = static_cast<double>(weight_bytes) + static_cast<double>(attended) * kv_per_token;
      row["decode_tok_s"] = decode;
      row["resident_tokens"] = attended;
      row["bytes_per_decode_token"] = bytes;
      row["roofline_tok_s"] = bandwidth / bytes;
      row["fraction_of_roofline"] = decode / (bandwidth / bytes);
      row["read_roofline_tok_s"] = bw.read_per_s / bytes;
      row["fraction_of_read_roofline"] = decode / (bw.read_per_s / bytes);
      row["triad_roofline_tok_s"] = bw.triad_per_s / bytes;
      row["fraction_of_triad_roofline"] = decode / (bw.triad_per_s / bytes);
      row["roofline_tok_per_cpu_s"] = bw.per_cpu_s / bytes;
      row["fraction_of_cpu_roofline"] = decode_cpu / (bw.per_cpu_s / bytes);
      results.push_back(row);
      std::fprintf(stderr, "%s %s %s ctx %d: prefill %s tok/s, decode %.1f tok/s (roofline %.1f)\n",
                   name.c_str(), core::DTypeName(o.kv_dtype), mode, ctx,
                   row["prefill_tok_s"].dump().c_str(), decode, bandwidth / bytes);
    }
  }
  return {{"model", name},
          {"kv_dtype", core::DTypeName(o.kv_dtype)},
          {"weight_bytes", weight_bytes},
          {"kv_bytes_per_token", kv_per_token},
          {"results", results}};
}

// int8 / f32 for every (model, mode, context) measured with both KV cache types.
// Each non-f32 KV type's rows beside the f32 rows of the same model, mode and context
// (keys named after the type, e.g. decode_per_cpu_s_int8_over_f32).
json KvDtypeRatios(const json& models) {
  json out = json::array();
  for (const json& a : models) {
    if (!a.contains("results") || a["kv_dtype"] == "f32") continue;
    const std::string dt = a["kv_dtype"].get<std::string>();
    for (const json& b : models) {
      if (!b.contains("results") || b["kv_dtype"] != "f32" || b["model"] != a["model"]) continue;
      for (const json& ra : a["results"]) {
        for (const json& rb : b["results"]) {
          if (ra["mode"] != rb["mode"] || ra["context"] != rb["context"]) continue;
          json r = {
              {"model", a["model"]},
              {"mode", ra["mode"]},
              {"context", ra["context"]},
              {"decode_per_cpu_s_" + dt + "_over_f32",
               ra["decode_tok_per_cpu_s"].get<double>() / rb["decode_tok_per_cpu_s"].get<double>()},
              {"kv_bytes_per_token_" + dt + "_over_f32",
               a["kv_bytes_per_token"].get<double>() / b["kv_bytes_per_token"].get<double>()}};
          if (ra["prefill_tok_per_cpu_s"].is_number() && rb["prefill_tok_per_cpu_s"].is_number()) {
            r["prefill_per_cpu_s_" + dt + "_over_f32"] = ra["prefill_tok_per_cpu_s"].get<double>() /
                                                         rb["prefill_tok_per_cpu_s"].get<double>();
          }
          out.push_back(r);
        }
      }
    }
  }
  return out;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "Prefill and decode throughput of the engine per KV mode and context, beside the "
      "memory-bandwidth roofline (JSON).",
      "bench_engine"};
  kvfold::ApplyConvention(app);
  Options o;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::string stories = "../shared/models/stories260K/stories260K.bin";
  std::vector<std::string> kv_dtypes = {"f32"};
  bool quick = false, no_big = false, no_gemm = false;
  CLI::Option* stories_flag = app.add_option(
      "--stories", stories, "a model LoadModel reads (llama2.c file or HF directory)");
  kvfold::AddSwitch(app, "--no-big", no_big, "skip the random llama-3.2-1b-shape model");
  kvfold::AddSwitch(app, "--quick", quick, "short run (prefill capped at 4096 tokens)");
  app.add_option("--threads", threads, "compute threads")->check(kvfold::NonNegative());
  app.add_option("--contexts", o.contexts, "context lengths (comma-separated)")->delimiter(',');
  app.add_option("--decode-steps", o.decode_steps, "timed decode steps per row");
  app.add_option("--window", o.window, "window of sliding/sink");
  app.add_option("--kv-dtypes", kv_dtypes, "KV cache types (comma-separated: f32,f16,int8)")
      ->delimiter(',');
  app.add_option("--modes", o.modes, "KV modes (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"full", "sliding", "sink"}));
  kvfold::AddSwitch(app, "--no-gemm", no_gemm, "skip the GEMM comparison with OpenBLAS");
  kvfold::AddSwitch(app, "--prefill-warmup", o.prefill_warmup,
                    "an untimed prefill of the same prompt before each timed one (as llama-bench)");
  bench::BatchDecodeOptions batch;
  batch.sizes.clear();
  app.add_option("--batch-sizes", batch.sizes,
                 "sequences per batched decode step, e.g. 1,16 (empty = skip)")
      ->delimiter(',')
      ->check(kvfold::Positive());
  app.add_option("--batch-rounds", batch.rounds, "interleaved rounds per batch size (median)")
      ->check(kvfold::Positive());
  app.add_option("--batch-prompt-tokens", batch.prompt_tokens,
                 "each batched sequence's prompt: the context its decode steps start from")
      ->check(kvfold::Positive());
  int prefill_pieces = 0, pieces_band = 2000;
  app.add_option("--prefill-pieces", prefill_pieces,
                 "time every piece of a full-mode prompt of this many tokens fed in pieces "
                 "(0 = skip)")
      ->check(kvfold::NonNegative());
  app.add_option("--pieces-band", pieces_band, "context entries per row of the piece table")
      ->check(kvfold::Positive());
  int scoring_prefill = 0, scoring_reps = 5;
  app.add_option("--scoring-prefill", scoring_prefill,
                 "prefill a full-mode prompt of this many tokens plain and scored (every row's "
                 "log-probabilities), alternated (0 = skip)")
      ->check(kvfold::NonNegative());
  app.add_option("--scoring-reps", scoring_reps, "pairs of --scoring-prefill runs (median)")
      ->check(kvfold::Positive());
  bool isa_probe = false;
  kvfold::AddSwitch(app, "--isa-probe", isa_probe,
                    "print one core's instruction throughput beside the 16-row Q8 MatMul, "
                    "and exit");
  bool sampler_probe = false;
  int sampler_vocab = 32000;
  double sampler_sigma = 3.0;
  kvfold::AddSwitch(app, "--sampler-probe", sampler_probe,
                    "print the sampler's cost per token for each setting, and exit");
  app.add_option("--sampler-vocab", sampler_vocab, "vocabulary of --sampler-probe's logits")
      ->check(kvfold::Positive());
  app.add_option("--sampler-sigma", sampler_sigma,
                 "spread of --sampler-probe's normal logits (smaller: flatter)")
      ->check(CLI::PositiveNumber);
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  if (sampler_probe) {
    json probe = bench::SamplerProbe(sampler_vocab, static_cast<float>(sampler_sigma));
    bench::AddCpu(probe);
    std::printf("%s\n", probe.dump(2).c_str());
    return 0;
  }
  if (isa_probe) {
    json probe = bench::IsaProbe();
    bench::AddCpu(probe);
    std::printf("%s\n", probe.dump(2).c_str());
    return 0;
  }
  std::vector<core::DType> dtypes;
  for (const std::string& p : kv_dtypes) {
    auto d = engine::ParseKvDType(p);
    if (!d.ok()) {
      std::fprintf(stderr, "bench_engine: --kv-dtypes: %s\n", d.status().ToString().c_str());
      return kExitUsage;
    }
    dtypes.push_back(*d);
  }
  if (quick) o.max_prefill = 4096;  // longer contexts are filled synthetically for decode
  auto backend = kernels::CreateCpuBackend({threads, false});
  const Bandwidth bandwidth = MeasureBandwidth(threads);
  json out;
  out["threads"] = threads;
  out["backend"] = backend->Name();
  out["bandwidth_bytes_per_s"] = bandwidth.per_s;
  out["bandwidth_bytes_per_cpu_s"] = bandwidth.per_cpu_s;
  out["bandwidth_read_bytes_per_s"] = bandwidth.read_per_s;
  out["bandwidth_triad_bytes_per_s"] = bandwidth.triad_per_s;
  bench::AddCpu(out);
  if (!no_gemm) {
    // A 128-token prompt through the stories110m shape's matrices, then larger ones.
    out["gemm"] = json::array();
    for (const auto [n, m, k] : {std::array{128, 768, 768}, std::array{128, 2048, 768},
                                 std::array{128, 768, 2048}, std::array{1, 2048, 2048},
                                 std::array{128, 2048, 2048}}) {
      out["gemm"].push_back(GemmVsOpenBlas(*backend, n, m, k));
    }
  }
  json models = json::array();
  // The KV cache types alternate row by row (mode, context), so load noise on a shared
  // machine hits both sides of each kv_dtype_ratios entry alike.
  auto bench_all = [&](const std::string& name, const model::ModelFile& m, const Options& opt) {
    std::vector<json> per_dtype(dtypes.size());
    for (const std::string& mode : opt.modes) {
      for (int ctx : opt.contexts) {
        for (size_t k = 0; k < dtypes.size(); ++k) {
          Options one = opt;
          one.kv_dtype = dtypes[k];
          one.modes = {mode};
          one.contexts = {ctx};
          json r = BenchModel(name, m, *backend, one, bandwidth);
          if (per_dtype[k].is_null() || !r.contains("results")) {
            if (per_dtype[k].is_null() || !per_dtype[k].contains("error")) per_dtype[k] = r;
            continue;
          }
          if (!per_dtype[k].contains("results")) continue;
          for (json& row : r["results"]) per_dtype[k]["results"].push_back(std::move(row));
        }
      }
    }
    for (json& j : per_dtype) models.push_back(std::move(j));
  };
  if (auto m = model::LoadModel(stories); m.ok()) {
    bench_all(stories_flag->count() > 0 ? std::filesystem::path(stories).filename().string() : "stories260K",
              *m, o);
    if (!batch.sizes.empty()) {
      batch.steps = o.decode_steps;
      engine::EngineOptions eo;
      eo.kv_dtype = dtypes.empty() ? core::DType::kF32 : dtypes.front();
      auto e = engine::Engine::Create(*m, backend.get(), eo);
      out["batch_decode"] = e.ok() ? bench::BenchBatchDecode(**e, batch)
                                   : json{{"error", e.status().ToString()}};
      out["batch_decode"]["kv_dtype"] = core::DTypeName(eo.kv_dtype);
      std::fprintf(stderr, "batch decode: %s\n", out["batch_decode"].dump().c_str());
    }
    // An engine whose pool holds a `tokens`-token prompt's full-mode KV (F32, the engine's
    // default), with room to spare.
    auto prompt_engine = [&](int tokens) {
      engine::EngineOptions eo;
      const absl::StatusOr<uint64_t> per_token = core::KvBytesPerToken(
          {static_cast<uint64_t>(m->config.num_layers), static_cast<uint64_t>(m->config.kv_dim())});
      if (per_token.ok()) {
        eo.kv_pool_bytes = std::max<size_t>(eo.kv_pool_bytes, (tokens + 4096) * *per_token);
      }
      return engine::Engine::Create(*m, backend.get(), eo);
    };
    if (prefill_pieces > 0) {
      auto e = prompt_engine(prefill_pieces);
      out["prefill_pieces"] = e.ok() ? bench::BenchPrefillPieces(**e, prefill_pieces, pieces_band)
                                     : json{{"error", e.status().ToString()}};
    }
    if (scoring_prefill > 0) {
      auto e = prompt_engine(scoring_prefill);
      out["scoring_prefill"] = e.ok()
                                   ? bench::BenchScoringPrefill(**e, scoring_prefill, scoring_reps)
                                   : json{{"error", e.status().ToString()}};
      std::fprintf(stderr, "scoring prefill: %s\n", out["scoring_prefill"].dump().c_str());
    }
  } else {
    std::fprintf(stderr, "skipping stories260K: %s\n", m.status().ToString().c_str());
  }
  if (!no_big) {
    Options big = o;
    big.decode_steps = quick ? 2 : std::min(o.decode_steps, 8);
    big.max_prefill = quick ? 128 : 1024;
    auto config = model::NamedShape("llama-3.2-1b");
    std::fprintf(stderr, "generating a random llama-3.2-1b-shape bf16 model...\n");
    model::ModelFile m = model::MakeRandomModel(*config, 1, core::DType::kBF16);
    bench_all("llama-3.2-1b-random-bf16", m, big);
  }
  out["models"] = models;
  out["kv_dtype_ratios"] = KvDtypeRatios(models);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace kvfold

int main(int argc, char** argv) { return kvfold::Main(argc, argv); }
