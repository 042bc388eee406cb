// bench_gpu: decode throughput of a random Llama-3.1-8B-shape BF16 model on one GPU, built
// directly on the kernels of kernels/cuda (weights generated on the device, nothing read
// from disk), for full and memory modes at 1k and 32k history, batch 1 and 32, BF16 and
// INT8 KV, eager launches and a CUDA graph of the whole step. Prints JSON (and --out FILE).
//
//   bench_gpu [--out FILE] [--steps N] [--quick]
//
// A decode step = embedding, 32 x (RMSNorm, q/k/v GEMMs, RoPE(q), KV store, paged
// attention with key RoPE, o GEMM + residual, RMSNorm, gate|up GEMM, SiLU*mul, down GEMM +
// residual), final RMSNorm, lm_head GEMM, argmax; the argmax feeds the next step's
// embedding on the device (no host round trip). History is held fixed so every step reads
// the same bytes. Achieved bandwidth = (weight bytes + KV bytes read) / step time.
// INT8 KV runs the engine's int8 decode ops (the CUDA backend's StoreKvInt8 and
// AttentionInt8 kernels, kernels::KvCacheI8 layout): the new token goes to its block's
// F32 page, attention reads that (own) block from the page and every other block as int8
// codes with fp16 scales. No block is sealed (the history is fixed).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/command_line.h"
#include "core/status_macros.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/sampling.cuh"

namespace kvfold::kernels::cuda {
namespace {

// Llama-3.1-8B.
constexpr int kHidden = 4096, kLayers = 32, kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int kInter = 14336, kVocab = 128256, kBlock = 16;
constexpr int kQDim = kHeads * kHeadDim, kKvDim = kKvHeads * kHeadDim;
constexpr int kMemSlots = 64, kMemWindow = 1024;  // memory mode: 64 memory slots + window
constexpr int kVGroup = 128;

class DeviceMem {
 public:
  ~DeviceMem() {
    for (void* p : ptrs_) cudaFree(p);
  }
  absl::StatusOr<void*> Alloc(size_t bytes) {
    void* p = nullptr;
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes), absl::StrCat("cudaMalloc ", bytes));
    ptrs_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> ptrs_;
};

#define ALLOC(var, type, bytes)                     \
  type* var = nullptr;                              \
  {                                                 \
    auto p_ = mem.Alloc(bytes);                     \
    if (!p_.ok()) return p_.status();               \
    var = static_cast<type*>(*p_);                  \
  }

struct Weights {
  void *embed, *lm_head, *final_norm;
  struct Layer {
    void *attn_norm, *ffn_norm, *wq, *wk, *wv, *wo, *w_gate_up, *w_down;
  } layers[kLayers];
  size_t decode_bytes = 0;  // bytes one decode step reads (all but the embedding table)
};

absl::Status MakeWeights(DeviceMem& mem, cudaStream_t stream, Weights* w) {
  uint64_t seed = 1;
  auto fill = [&](void** out, int64_t n, float lo, float hi, bool counted) -> absl::Status {
    auto p = mem.Alloc(n * 2);
    if (!p.ok()) return p.status();
    *out = *p;
    if (counted) w->decode_bytes += n * 2;
    return FillUniform(*out, core::DType::kBF16, n, seed++, lo, hi, stream);
  };
  const float a = 0.02f;
  KVFOLD_RETURN_IF_ERROR(fill(&w->embed, int64_t{kVocab} * kHidden, -1, 1, false));
  KVFOLD_RETURN_IF_ERROR(fill(&w->lm_head, int64_t{kVocab} * kHidden, -a, a, true));
  KVFOLD_RETURN_IF_ERROR(fill(&w->final_norm, kHidden, 0.9f, 1.1f, true));
  for (auto& l : w->layers) {
    KVFOLD_RETURN_IF_ERROR(fill(&l.attn_norm, kHidden, 0.9f, 1.1f, true));
    KVFOLD_RETURN_IF_ERROR(fill(&l.ffn_norm, kHidden, 0.9f, 1.1f, true));
    KVFOLD_RETURN_IF_ERROR(fill(&l.wq, int64_t{kQDim} * kHidden, -a, a, true));
    KVFOLD_RETURN_IF_ERROR(fill(&l.wk, int64_t{kKvDim} * kHidden, -a, a, true));
    KVFOLD_RETURN_IF_ERROR(fill(&l.wv, int64_t{kKvDim} * kHidden, -a, a, true));
    KVFOLD_RETURN_IF_ERROR(fill(&l.wo, int64_t{kHidden} * kQDim, -a, a, true));
    KVFOLD_RETURN_IF_ERROR(fill(&l.w_gate_up, int64_t{2} * kInter * kHidden, -a, a, true));
    KVFOLD_RETURN_IF_ERROR(fill(&l.w_down, int64_t{kHidden} * kInter, -a, a, true));
  }
  KVFOLD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "weights");
  return absl::OkStatus();
}

struct Config {
  std::string mode;  // "full" | "memory"
  int history;
  int batch;
  core::DType kv_type;
};

struct Result {
  Config config;
  std::string status = "ok";
  double eager_ms = 0, graph_ms = 0;
  double kv_bytes = 0, step_bytes = 0;
};

// One configuration: allocates its KV pool and activations, runs eager and graph steps.
absl::Status RunConfig(const Weights& w, cublasHandle_t cublas, cudaStream_t stream,
                       int steps, Result* r) {
  const Config& c = r->config;
  const int B = c.batch;
  const bool memory = c.mode == "memory";
  const int prefix = memory ? kMemSlots : 0;
  const int main_len = memory ? std::min(c.history, kMemWindow) : c.history;
  // +1: the slot the new token is written to.
  const int main_blocks = (main_len + 1 + kBlock - 1) / kBlock;
  const int prefix_blocks = (prefix + kBlock - 1) / kBlock;
  const int blocks_per_seq = main_blocks + prefix_blocks;
  const int64_t num_blocks = int64_t{B} * blocks_per_seq;
  const int64_t slots = num_blocks * kBlock;
  const size_t elem = core::DTypeSize(c.kv_type);
  const size_t cache_bytes = slots * kKvDim * elem;  // one of K or V, one layer
  size_t scale_bytes = 0;  // int8: fp16 scales + one F32 page per sequence, K and V
  const size_t page_bytes = size_t{kBlock} * kKvDim * 4 * B;
  if (c.kv_type == core::DType::kI8) {
    scale_bytes = num_blocks * kKvDim * 2 + slots * (kKvDim / kVGroup) * 2 + 2 * page_bytes;
  }
  const double need = double(kLayers) * (2 * cache_bytes + scale_bytes);
  size_t free_b = 0, total_b = 0;
  KVFOLD_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if (need + (1ull << 30) > double(free_b)) {
    r->status = absl::StrFormat("skipped: KV needs %.1f GiB, %.1f GiB free", need / (1 << 30),
                                double(free_b) / (1 << 30));
    return absl::OkStatus();
  }
  DeviceMem mem;
  std::vector<void*> kc(kLayers), vc(kLayers);
  std::vector<void*> ks(kLayers, nullptr), vs(kLayers, nullptr);
  std::vector<float*> kp(kLayers, nullptr), vp(kLayers, nullptr);
  for (int l = 0; l < kLayers; ++l) {
    ALLOC(k, void, cache_bytes);
    ALLOC(v, void, cache_bytes);
    kc[l] = k;
    vc[l] = v;
    KVFOLD_RETURN_IF_ERROR(FillUniform(k, c.kv_type, slots * kKvDim, 100 + l, -1, 1, stream));
    KVFOLD_RETURN_IF_ERROR(FillUniform(v, c.kv_type, slots * kKvDim, 200 + l, -1, 1, stream));
    if (c.kv_type == core::DType::kI8) {
      ALLOC(k_scale, void, num_blocks * kKvDim * 2);
      ALLOC(v_scale, void, slots * (kKvDim / kVGroup) * 2);
      ALLOC(k_page, float, page_bytes);
      ALLOC(v_page, float, page_bytes);
      KVFOLD_RETURN_IF_ERROR(FillUniform(k_scale, core::DType::kF16, num_blocks * kKvDim, 300 + l,
                                  0.005f, 0.01f, stream));
      KVFOLD_RETURN_IF_ERROR(FillUniform(v_scale, core::DType::kF16, slots * (kKvDim / kVGroup),
                                  400 + l, 0.005f, 0.01f, stream));
      KVFOLD_RETURN_IF_ERROR(FillUniform(k_page, core::DType::kF32, page_bytes / 4, 500 + l, -1, 1, stream));
      KVFOLD_RETURN_IF_ERROR(FillUniform(v_page, core::DType::kF32, page_bytes / 4, 600 + l, -1, 1, stream));
      ks[l] = k_scale;
      vs[l] = v_scale;
      kp[l] = k_page;
      vp[l] = v_page;
    }
  }
  // Block tables: sequence b owns blocks [b * blocks_per_seq, ...): prefix, then main.
  std::vector<int32_t> tables(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) tables[i] = static_cast<int32_t>(i);
  std::vector<kernels::AttnRow> rows(B);
  std::vector<int32_t> positions(B), slot_of(B), tokens(B);
  // int8: sequence b's newest (own, open) block lives in page b.
  std::vector<int32_t> page_of(B);
  std::vector<kernels::AttnOwnBlock> own(B);
  for (int b = 0; b < B; ++b) {
    kernels::AttnRow& f = rows[b];
    f.prefix_table = b * blocks_per_seq;
    f.prefix_visible = prefix;
    f.prefix_pos_base = 0;  // prefix positions: all 0 (memory slots)
    f.prefix_pos_stride = 0;
    f.main_table = b * blocks_per_seq + prefix_blocks;
    f.main_front = 0;
    f.main_lo = 0;
    f.main_hi = main_len + 1;  // history + the new token
    f.main_pos_lo = memory ? 1 : 0;
    positions[b] = f.main_pos_lo + main_len;
    slot_of[b] = (b * blocks_per_seq + prefix_blocks) * kBlock + main_len;
    tokens[b] = (b * 7919) % kVocab;
    page_of[b] = b;
    own[b] = {slot_of[b] / kBlock, b, 0};
  }
  const int rope_rows = main_len + 2;
  std::vector<float> rope(int64_t{rope_rows} * kHeadDim);
  for (int i = 0; i < kHeadDim / 2; ++i) {
    const float inv_freq = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * i / kHeadDim));
    for (int p = 0; p < rope_rows; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      rope[int64_t{p} * kHeadDim + i] = static_cast<float>(std::cos(double{angle}));
      rope[int64_t{p} * kHeadDim + kHeadDim / 2 + i] = static_cast<float>(std::sin(double{angle}));
    }
  }
  ALLOC(d_tables, int32_t, tables.size() * 4);
  ALLOC(d_rows, kernels::AttnRow, rows.size() * sizeof(kernels::AttnRow));
  ALLOC(d_pos, int32_t, B * 4);
  ALLOC(d_slots, int32_t, B * 4);
  ALLOC(d_tokens, int32_t, B * 4);
  ALLOC(d_rope, float, rope.size() * 4);
  ALLOC(d_pages, int32_t, B * 4);
  ALLOC(d_own, kernels::AttnOwnBlock, own.size() * sizeof(kernels::AttnOwnBlock));
  auto up = [&](void* dst, const void* src, size_t bytes) {
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "upload");
  };
  KVFOLD_RETURN_IF_ERROR(up(d_tables, tables.data(), tables.size() * 4));
  KVFOLD_RETURN_IF_ERROR(up(d_rows, rows.data(), rows.size() * sizeof(kernels::AttnRow)));
  KVFOLD_RETURN_IF_ERROR(up(d_pos, positions.data(), B * 4));
  KVFOLD_RETURN_IF_ERROR(up(d_slots, slot_of.data(), B * 4));
  KVFOLD_RETURN_IF_ERROR(up(d_tokens, tokens.data(), B * 4));
  KVFOLD_RETURN_IF_ERROR(up(d_rope, rope.data(), rope.size() * 4));
  KVFOLD_RETURN_IF_ERROR(up(d_pages, page_of.data(), B * 4));
  KVFOLD_RETURN_IF_ERROR(up(d_own, own.data(), own.size() * sizeof(kernels::AttnOwnBlock)));
  ALLOC(x, float, int64_t{B} * kHidden * 4);
  ALLOC(h, float, int64_t{B} * kHidden * 4);
  ALLOC(q, float, int64_t{B} * kQDim * 4);
  ALLOC(k_new, float, int64_t{B} * kKvDim * 4);
  ALLOC(v_new, float, int64_t{B} * kKvDim * 4);
  ALLOC(attn, float, int64_t{B} * kQDim * 4);
  ALLOC(gate_up, float, int64_t{B} * 2 * kInter * 4);
  ALLOC(act, float, int64_t{B} * kInter * 4);
  ALLOC(logits, float, int64_t{B} * kVocab * 4);
  const size_t scratch_bytes = LinearScratchBytes(B, kInter, core::DType::kBF16);
  ALLOC(scratch, void, scratch_bytes);
  const size_t ws_bytes = AttentionWorkspaceBytes(kHeads, kKvHeads, kHeadDim);
  ALLOC(ws, void, ws_bytes);

  auto linear = [&](const float* in, int64_t k, const void* wt, int64_t m, float* out,
                    float beta) {
    LinearArgs a;
    a.x = in;
    a.num_tokens = B;
    a.in_features = k;
    a.w = wt;
    a.w_type = core::DType::kBF16;
    a.out_features = m;
    a.y = out;
    a.beta = beta;
    a.scratch = scratch;
    a.scratch_bytes = scratch_bytes;
    return Linear(cublas, stream, a);
  };
  auto step = [&]() -> absl::Status {
    KVFOLD_RETURN_IF_ERROR(EmbeddingGather(w.embed, core::DType::kBF16, kVocab, kHidden, d_tokens, B, x,
                                    stream));
    for (int l = 0; l < kLayers; ++l) {
      const auto& L = w.layers[l];
      KVFOLD_RETURN_IF_ERROR(RmsNorm(x, L.attn_norm, core::DType::kBF16, 1e-5f, B, kHidden, h, stream));
      KVFOLD_RETURN_IF_ERROR(linear(h, kHidden, L.wq, kQDim, q, 0));
      KVFOLD_RETURN_IF_ERROR(linear(h, kHidden, L.wk, kKvDim, k_new, 0));
      KVFOLD_RETURN_IF_ERROR(linear(h, kHidden, L.wv, kKvDim, v_new, 0));
      KVFOLD_RETURN_IF_ERROR(Rope(q, d_pos, d_rope, rope_rows, B, kHeads, kHeadDim, q, stream));
      Int8KvLayer i8;
      if (c.kv_type == core::DType::kI8) {
        // The engine's int8 write: the new token into its (open) block's F32 page.
        i8.k_codes = static_cast<int8_t*>(kc[l]);
        i8.v_codes = static_cast<int8_t*>(vc[l]);
        i8.k_scales = static_cast<uint16_t*>(ks[l]);
        i8.v_scales = static_cast<uint16_t*>(vs[l]);
        i8.k_pages = kp[l];
        i8.v_pages = vp[l];
        i8.num_blocks = num_blocks;
        i8.num_pages = B;
        i8.block_size = kBlock;
        i8.kv_dim = kKvDim;
        i8.value_group = kVGroup;
        KVFOLD_RETURN_IF_ERROR(StoreKvInt8(k_new, v_new, d_slots, d_pages, B, nullptr, 0, i8, stream));
      } else {
        KVFOLD_RETURN_IF_ERROR(StoreKv(k_new, v_new, d_slots, B, kKvHeads, kBlock, kHeadDim,
                                       num_blocks, kc[l], vc[l], c.kv_type, stream));
      }
      AttentionParams p;
      p.q = q;
      p.out = attn;
      p.rows = d_rows;
      p.block_tables = d_tables;
      p.k_cache = kc[l];
      p.v_cache = vc[l];
      p.cache_type = c.kv_type;
      p.k_scale = ks[l];
      p.v_scale = vs[l];
      p.v_group_size = kVGroup;
      if (c.kv_type == core::DType::kI8) {
        p.fp16_scales = true;
        p.own = d_own;
        p.k_pages = kp[l];
        p.v_pages = vp[l];
      }
      p.rope_table = d_rope;
      p.rope_rows = rope_rows;
      p.num_rows = B;
      p.num_heads = kHeads;
      p.num_kv_heads = kKvHeads;
      p.head_dim = kHeadDim;
      p.block_size = kBlock;
      p.scale = 1.0f / std::sqrt(float{kHeadDim});
      KVFOLD_RETURN_IF_ERROR(Attention(p, ws, ws_bytes, stream));
      KVFOLD_RETURN_IF_ERROR(linear(attn, kQDim, L.wo, kHidden, x, 1.0f));
      KVFOLD_RETURN_IF_ERROR(RmsNorm(x, L.ffn_norm, core::DType::kBF16, 1e-5f, B, kHidden, h, stream));
      KVFOLD_RETURN_IF_ERROR(linear(h, kHidden, L.w_gate_up, 2 * kInter, gate_up, 0));
      KVFOLD_RETURN_IF_ERROR(SiluMul(gate_up, 2 * kInter, gate_up + kInter, 2 * kInter, B, kInter,
                              act, stream));
      KVFOLD_RETURN_IF_ERROR(linear(act, kInter, L.w_down, kHidden, x, 1.0f));
    }
    KVFOLD_RETURN_IF_ERROR(RmsNorm(x, w.final_norm, core::DType::kBF16, 1e-5f, B, kHidden, h, stream));
    KVFOLD_RETURN_IF_ERROR(linear(h, kHidden, w.lm_head, kVocab, logits, 0));
    return Argmax(logits, B, kVocab, d_tokens, stream);
  };

  cudaEvent_t t0, t1;
  KVFOLD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t0), "event");
  KVFOLD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&t1), "event");
  auto time_steps = [&](auto&& run_one, double* ms_per_step) -> absl::Status {
    for (int i = 0; i < 3; ++i) KVFOLD_RETURN_IF_ERROR(run_one());
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaEventRecord(t0, stream), "record");
    for (int i = 0; i < steps; ++i) KVFOLD_RETURN_IF_ERROR(run_one());
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaEventRecord(t1, stream), "record");
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(t1), "sync");
    float ms = 0;
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, t0, t1), "elapsed");
    *ms_per_step = ms / steps;
    return absl::OkStatus();
  };
  KVFOLD_RETURN_IF_ERROR(time_steps(step, &r->eager_ms));

  // The same step captured once into a CUDA graph.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  KVFOLD_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                              "begin capture");
  const absl::Status captured = step();
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (captured.ok() && end == cudaSuccess &&
      cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
    KVFOLD_RETURN_IF_ERROR(time_steps(
        [&]() { return CudaStatus(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); },
        &r->graph_ms));
  } else {
    cudaGetLastError();
    r->graph_ms = -1;
  }
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);

  const double keys = double(B) * (prefix + main_len + 1);
  double per_key = 2.0 * kKvDim * elem;  // K and V
  // int8: codes + fp16 scales (the own block's <= 16 entries come from the F32 page; not
  // counted separately).
  if (c.kv_type == core::DType::kI8) per_key += 2.0 * kKvDim / kVGroup + 2.0 * kKvDim / kBlock;
  r->kv_bytes = keys * per_key * kLayers;
  r->step_bytes = double(w.decode_bytes) + r->kv_bytes;
  return cudaStreamSynchronize(stream) == cudaSuccess ? absl::OkStatus()
                                                       : absl::InternalError("sync");
}

// Device-to-device copy bandwidth (read + write bytes / time), the practical ceiling.
absl::StatusOr<double> CopyBandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{2} << 30;
  DeviceMem mem;
  auto a = mem.Alloc(bytes);
  if (!a.ok()) return a.status();
  auto b = mem.Alloc(bytes);
  if (!b.ok()) return b.status();
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  KVFOLD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(*b, *a, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
  cudaEventRecord(t0, stream);
  const int reps = 10;
  for (int i = 0; i < reps; ++i) {
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(*b, *a, bytes, cudaMemcpyDeviceToDevice, stream),
                                "copy");
  }
  cudaEventRecord(t1, stream);
  KVFOLD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(t1), "copy sync");
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return 2.0 * bytes * reps / (ms / 1e3);
}

int Main(int argc, char** argv) {
  std::string out_path;
  int steps = 20;
  bool quick = false;
  CLI::App app{
      "GPU decode benchmark: the CUDA backend against the memory-bandwidth roofline "
      "(JSON).",
      "bench_gpu"};
  kvfold::ApplyConvention(app);
  app.add_option("--out", out_path, "also write the JSON here");
  app.add_option("--steps", steps, "timed decode steps")->check(kvfold::Positive());
  kvfold::AddSwitch(app, "--quick", quick, "short run");
  if (std::optional<int> rc = kvfold::ParseCommandLine(app, argc, argv)) return *rc;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "bench_gpu: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  const double peak = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8;  // DDR: two transfers/clock
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cublasHandle_t cublas;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "bench_gpu: cublasCreate failed\n");
    return 1;
  }
  // A fixed cuBLAS workspace makes the GEMMs capturable into a CUDA graph.
  void* cublas_ws = nullptr;
  cudaMalloc(&cublas_ws, 64 << 20);
  cublasSetWorkspace(cublas, cublas_ws, 64 << 20);
  auto copy_bw = CopyBandwidth(stream);

  const auto t_start = std::chrono::steady_clock::now();
  DeviceMem weight_mem;
  Weights w;
  if (absl::Status s = MakeWeights(weight_mem, stream, &w); !s.ok()) {
    std::fprintf(stderr, "bench_gpu: weights: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<Result> results;
  for (const char* mode : {"full", "memory"}) {
    for (int history : {1024, 32768}) {
      for (int batch : {1, 32}) {
        for (core::DType kv : {core::DType::kBF16, core::DType::kI8}) {
          if (quick && (history > 1024 || kv == core::DType::kI8)) continue;
          Result r;
          r.config = {mode, history, batch, kv};
          if (absl::Status s = RunConfig(w, cublas, stream, steps, &r); !s.ok()) {
            r.status = "error: " + s.ToString();
          }
          std::fprintf(stderr, "%-6s history %5d batch %2d kv %-4s: %s eager %.2f ms graph %.2f ms\n",
                       mode, history, batch, core::DTypeName(kv), r.status.c_str(), r.eager_ms,
                       r.graph_ms);
          results.push_back(r);
        }
      }
    }
  }
  std::string json = absl::StrFormat(
      "{\n  \"device\": \"%s\",\n  \"model\": \"llama-3.1-8b shape, bf16 weights, random\",\n"
      "  \"note\": \"memory mode = %d memory slots + %d-token window, steady-state decode; "
      "fold cost (projector + window re-prefill) not included; int8 rows run the engine's "
      "int8 ops: new token to its block's F32 page, own block read from the page, other "
      "blocks int8 with fp16 scales, no seal\",\n"
      "  \"weight_bytes_per_step\": %.0f,\n  \"peak_bandwidth_gbs\": %.1f,\n"
      "  \"copy_bandwidth_gbs\": %.1f,\n  \"steps\": %d,\n  \"total_seconds\": %.1f,\n"
      "  \"results\": [\n",
      prop.name, kMemSlots, kMemWindow, double(w.decode_bytes), peak / 1e9, copy_bw.ok() ? *copy_bw / 1e9 : -1.0, steps,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double best = r.graph_ms > 0 ? std::min(r.eager_ms, r.graph_ms) : r.eager_ms;
    const bool ok = r.status == "ok" && best > 0;
    absl::StrAppendFormat(
        &json,
        "    {\"mode\": \"%s\", \"history\": %d, \"batch\": %d, \"kv\": \"%s\", \"status\": \"%s\","
        " \"eager_ms\": %.3f, \"graph_ms\": %.3f, \"tok_per_s\": %.1f, \"kv_gb_per_step\": %.3f,"
        " \"achieved_gbs\": %.1f, \"fraction_of_peak\": %.3f}%s\n",
        r.config.mode, r.config.history, r.config.batch, core::DTypeName(r.config.kv_type),
        r.status, r.eager_ms, r.graph_ms, ok ? r.config.batch * 1e3 / best : 0.0,
        r.kv_bytes / 1e9, ok ? r.step_bytes / (best / 1e3) / 1e9 : 0.0,
        ok && peak > 0 ? r.step_bytes / (best / 1e3) / peak : 0.0,
        i + 1 < results.size() ? "," : "");
  }
  json += "  ]\n}\n";
  std::fputs(json.c_str(), stdout);
  if (!out_path.empty()) std::ofstream(out_path) << json;
  cublasDestroy(cublas);
  cudaFree(cublas_ws);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace kvfold::kernels::cuda

int main(int argc, char** argv) { return kvfold::kernels::cuda::Main(argc, argv); }
