#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/q8_gemv.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"

namespace kvfold::kernels::cuda {
namespace {

using kernels::AttentionShape;
using kernels::Buffer;
using core::DType;
using kernels::Stream;
using kernels::Tensor;

// Q8 weights: the device kernels read the CPU's layout (core/dtype.h kQ8).
static_assert(core::kQ8Block == kQ8BlockSize && core::Q8RowBytes(77) == Q8RowBytesDevice(77));

absl::StatusOr<core::DType> FloatType(const Tensor& t, const char* what) {
  switch (t.dtype) {
    case DType::kF32: return core::DType::kF32;
    case DType::kF16: return core::DType::kF16;
    case DType::kBF16: return core::DType::kBF16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": expected a float tensor, got ", t.DebugString()));
  }
}

absl::Status Expect(bool ok, const char* op, const std::string& detail) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", detail));
}

// The fields of an attention call besides its cache: the n rows' queries, outputs, key
// lists and block tables, the rope table and the shape (the callers checked them).
AttentionParams RowParams(Tensor q, Tensor out, Tensor rows, Tensor block_tables, Tensor rope_table,
                          const AttentionShape& shape, int64_t n) {
  AttentionParams p;
  p.q = static_cast<const float*>(q.data);
  p.out = static_cast<float*>(out.data);
  p.rows = static_cast<const kernels::AttnRow*>(rows.data);
  p.block_tables = static_cast<const int32_t*>(block_tables.data);
  p.rope_table = static_cast<const float*>(rope_table.data);
  p.rope_rows = static_cast<int32_t>(rope_table.dim(0));
  p.num_rows = static_cast<int32_t>(n);
  p.num_heads = shape.num_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.head_dim = shape.head_dim;
  p.block_size = shape.block_size;
  p.scale = shape.scale;
  return p;
}

// The shapes of a kernels::KvCacheI8 (the same rules as the CPU backend's CheckI8Cache)
// as the raw layer the kernels take.
absl::StatusOr<Int8KvLayer> I8Layer(const kernels::KvCacheI8& c, const char* op) {
  Int8KvLayer l;
  const int64_t num_blocks = c.k_codes.dim(0), bs = c.k_codes.dim(1);
  const int64_t kv_dim = c.k_codes.rank == 3 ? c.k_codes.dim(2) : 0;
  const int64_t v_groups = c.value_group >= 1 ? (kv_dim + c.value_group - 1) / c.value_group : 0;
  const bool ok = c.k_codes.dtype == DType::kI8 && c.v_codes.dtype == DType::kI8 &&
                  c.k_scales.dtype == DType::kF16 && c.v_scales.dtype == DType::kF16 &&
                  c.k_pages.dtype == DType::kF32 && c.v_pages.dtype == DType::kF32 &&
                  kv_dim > 0 && bs > 0 && v_groups > 0 &&
                  c.v_codes.numel() == c.k_codes.numel() &&
                  c.k_scales.numel() == num_blocks * kv_dim &&
                  c.v_scales.numel() == num_blocks * bs * v_groups && c.k_pages.rank == 3 &&
                  c.k_pages.dim(1) == bs && c.k_pages.dim(2) == kv_dim &&
                  c.v_pages.numel() == c.k_pages.numel() && kv_dim <= INT32_MAX &&
                  bs <= INT32_MAX;
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": inconsistent int8 cache ", c.k_codes.DebugString(), " ", c.k_scales.DebugString(),
        " ", c.v_scales.DebugString(), " ", c.k_pages.DebugString(), " group ", c.value_group));
  }
  l.k_codes = static_cast<int8_t*>(c.k_codes.data);
  l.v_codes = static_cast<int8_t*>(c.v_codes.data);
  l.k_scales = static_cast<uint16_t*>(c.k_scales.data);
  l.v_scales = static_cast<uint16_t*>(c.v_scales.data);
  l.k_pages = static_cast<float*>(c.k_pages.data);
  l.v_pages = static_cast<float*>(c.v_pages.data);
  l.num_blocks = num_blocks;
  l.num_pages = c.k_pages.dim(0);
  l.block_size = static_cast<int32_t>(bs);
  l.kv_dim = static_cast<int32_t>(kv_dim);
  l.value_group = c.value_group;
  return l;
}

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  ~CudaBuffer() override { cudaFree(data_); }
  void* data() const override { return data_; }
  size_t size_bytes() const override { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

// Device scratch owned by a stream; grows geometrically, never shrinks.
class Scratch {
 public:
  ~Scratch() { cudaFree(data_); }
  absl::StatusOr<void*> Get(size_t bytes, cudaStream_t stream) {
    if (bytes <= bytes_) return data_;
    // The old buffer may still be read by queued kernels.
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "scratch grow: sync");
    const size_t want = std::max(bytes, bytes_ * 2);
    cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaMalloc(&data_, want), "scratch grow: cudaMalloc");
    bytes_ = want;
    return data_;
  }
  size_t size() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaStream final : public Stream {
 public:
  CudaStream(cudaStream_t stream, cublasHandle_t cublas) : stream_(stream), cublas_(cublas) {}
  ~CudaStream() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  Scratch& cast_scratch() { return cast_scratch_; }
  Scratch& attention_scratch() { return attention_scratch_; }

 private:
  cudaStream_t stream_;
  cublasHandle_t cublas_;
  Scratch cast_scratch_;
  Scratch attention_scratch_;
};

absl::StatusOr<CudaStream*> AsCuda(Stream& stream) {
  auto* s = dynamic_cast<CudaStream*>(&stream);
  if (s == nullptr) return absl::InvalidArgumentError("CUDA backend: stream of another backend");
  return s;
}

#define KVFOLD_ASSIGN_STREAM(var, stream)            \
  auto var##_or = AsCuda(stream);                    \
  if (!var##_or.ok()) return var##_or.status();      \
  CudaStream* var = *var##_or

class CudaBackend final : public kernels::Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  std::string Name() const override { return absl::StrCat("cuda:", device_); }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
    void* data = nullptr;
    if (bytes > 0) {
      KVFOLD_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes),
                                  absl::StrCat("cudaMalloc(", bytes, " bytes)"));
    }
    return std::make_unique<CudaBuffer>(data, bytes);
  }

  absl::StatusOr<std::unique_ptr<Buffer>> AdoptWeights(
      const void* host, size_t bytes, std::shared_ptr<const void> keepalive) override {
    auto buffer = Allocate(bytes);
    if (!buffer.ok()) return buffer.status();
    if (bytes > 0) {
      KVFOLD_CUDA_RETURN_IF_ERROR(
          cudaMemcpy((*buffer)->data(), host, bytes, cudaMemcpyHostToDevice),
          "AdoptWeights: cudaMemcpy");
    }
    return buffer;  // `keepalive` is released: the device holds its own copy.
  }

  std::unique_ptr<Stream> CreateStream() override {
    cudaSetDevice(device_);
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    // Failures here leave null handles; the first op reports the CUDA error.
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cublasCreate(&cublas);
    return std::make_unique<CudaStream>(stream, cublas);
  }

  absl::Status CopyToDevice(Stream& stream, const void* host, Tensor dst) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    if (dst.size_bytes() == 0) return absl::OkStatus();
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.data, host, dst.size_bytes(),
                                                cudaMemcpyHostToDevice, s->stream()),
                                "CopyToDevice");
    return absl::OkStatus();
  }

  absl::Status CopyToHost(Stream& stream, Tensor src, void* host) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    if (src.size_bytes() == 0) return absl::OkStatus();
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, src.data, src.size_bytes(),
                                                cudaMemcpyDeviceToHost, s->stream()),
                                "CopyToHost");
    return absl::OkStatus();
  }

  absl::Status Copy(Stream& stream, Tensor src, Tensor dst) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    if (auto st = Expect(src.dtype == dst.dtype && src.numel() == dst.numel(), "Copy",
                         src.DebugString() + " -> " + dst.DebugString());
        !st.ok()) {
      return st;
    }
    if (src.size_bytes() == 0) return absl::OkStatus();
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.data, src.data, src.size_bytes(),
                                                cudaMemcpyDeviceToDevice, s->stream()),
                                "Copy");
    return absl::OkStatus();
  }

  absl::Status Synchronize(Stream& stream) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    KVFOLD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s->stream()), "Synchronize");
    return absl::OkStatus();
  }

  absl::Status Gather(Stream& stream, Tensor table, Tensor ids, Tensor out) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    if (table.dtype == DType::kQ8) return GatherQ8(*s, table, ids, out);
    auto table_type = FloatType(table, "Gather table");
    if (!table_type.ok()) return table_type.status();
    const int64_t width = table.rank >= 2 ? table.numel() / table.dim(0) : 1;
    const int64_t n = ids.numel();
    if (auto st = Expect(ids.dtype == DType::kI32 && out.dtype == DType::kF32 &&
                             out.numel() == n * width,
                         "Gather", table.DebugString() + " " + ids.DebugString() + " " +
                                       out.DebugString());
        !st.ok()) {
      return st;
    }
    return EmbeddingGather(table.data, *table_type, table.dim(0), width,
                           static_cast<const int32_t*>(ids.data), n,
                           static_cast<float*>(out.data), s->stream());
  }

  absl::Status RmsNorm(Stream& stream, Tensor x, Tensor weight, float eps,
                       Tensor out) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    auto w_type = FloatType(weight, "RmsNorm weight");
    if (!w_type.ok()) return w_type.status();
    const int64_t d = weight.numel();
    if (auto st = Expect(x.dtype == DType::kF32 && out.dtype == DType::kF32 && d > 0 &&
                             x.numel() % d == 0 && out.numel() == x.numel(),
                         "RmsNorm", x.DebugString() + " " + weight.DebugString());
        !st.ok()) {
      return st;
    }
    return cuda::RmsNorm(static_cast<const float*>(x.data), weight.data, *w_type, eps,
                         x.numel() / d, d, static_cast<float*>(out.data), s->stream());
  }

  absl::Status MatMul(Stream& stream, Tensor x, Tensor w, Tensor bias, Tensor out) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    if (w.dtype == DType::kQ8) return MatMulQ8(*s, x, w, bias, out);
    auto w_type = FloatType(w, "MatMul weight");
    if (!w_type.ok()) return w_type.status();
    const int64_t m = w.dim(0), k = w.rank >= 2 ? w.dim(1) : 1;
    const int64_t n = x.rank >= 1 ? x.dim(0) : 0;
    if (auto st = Expect(x.dtype == DType::kF32 && out.dtype == DType::kF32 &&
                             x.numel() == n * k && out.numel() == n * m &&
                             (bias.empty() || bias.numel() == m),
                         "MatMul", x.DebugString() + " x " + w.DebugString() + " -> " +
                                       out.DebugString());
        !st.ok()) {
      return st;
    }
    LinearArgs args;
    args.x = static_cast<const float*>(x.data);
    args.num_tokens = n;
    args.in_features = k;
    args.w = w.data;
    args.w_type = *w_type;
    args.out_features = m;
    if (!bias.empty()) {
      auto b_type = FloatType(bias, "MatMul bias");
      if (!b_type.ok()) return b_type.status();
      args.bias = bias.data;
      args.bias_type = *b_type;
    }
    args.y = static_cast<float*>(out.data);
    const size_t scratch_bytes = LinearScratchBytes(n, k, *w_type);
    if (scratch_bytes > 0) {
      auto scratch = s->cast_scratch().Get(scratch_bytes, s->stream());
      if (!scratch.ok()) return scratch.status();
      args.scratch = *scratch;
      args.scratch_bytes = scratch_bytes;
    }
    return Linear(s->cublas(), s->stream(), args);
  }

  absl::Status Rope(Stream& stream, Tensor x, Tensor positions, Tensor rope_table,
                    Tensor out) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    const int64_t n = x.rank >= 1 ? x.dim(0) : 0;
    const int64_t head_dim = rope_table.rank == 2 ? rope_table.dim(1) : 0;
    if (auto st = Expect(x.dtype == DType::kF32 && out.dtype == DType::kF32 &&
                             positions.dtype == DType::kI32 && positions.numel() == n &&
                             rope_table.dtype == DType::kF32 && head_dim > 0 && n > 0 &&
                             x.numel() % (n * head_dim) == 0 && out.numel() == x.numel(),
                         "Rope", x.DebugString() + " table " + rope_table.DebugString());
        !st.ok()) {
      return st;
    }
    return cuda::Rope(static_cast<const float*>(x.data),
                      static_cast<const int32_t*>(positions.data),
                      static_cast<const float*>(rope_table.data),
                      static_cast<int32_t>(rope_table.dim(0)), n,
                      static_cast<int32_t>(x.numel() / (n * head_dim)),
                      static_cast<int32_t>(head_dim), static_cast<float*>(out.data),
                      s->stream());
  }

  absl::Status StoreKv(Stream& stream, Tensor k, Tensor v, Tensor slots, Tensor k_cache,
                       Tensor v_cache) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    auto cache_type = FloatType(k_cache, "StoreKv cache");
    if (!cache_type.ok()) return cache_type.status();
    const int64_t n = slots.numel();
    // [num_blocks, num_kv_heads, block_size, head_dim] (kernels::FloatKvIndex).
    const int64_t kv_dim = k_cache.rank == 4 ? k_cache.dim(1) * k_cache.dim(3) : 0;
    if (auto st =
            Expect(slots.dtype == DType::kI32 && k.dtype == DType::kF32 && v.dtype == DType::kF32 &&
                       kv_dim > 0 && k_cache.dim(2) > 0 && k.numel() == n * kv_dim &&
                       v.numel() == n * kv_dim && v_cache.dtype == k_cache.dtype &&
                       v_cache.rank == 4 && v_cache.shape == k_cache.shape,
                   "StoreKv", k.DebugString() + " cache " + k_cache.DebugString());
        !st.ok()) {
      return st;
    }
    return cuda::StoreKv(static_cast<const float*>(k.data), static_cast<const float*>(v.data),
                         static_cast<const int32_t*>(slots.data), n, k_cache.dim(1), k_cache.dim(2),
                         k_cache.dim(3), k_cache.dim(0), k_cache.data, v_cache.data, *cache_type,
                         s->stream());
  }

  absl::Status Attention(Stream& stream, Tensor q, Tensor k_cache, Tensor v_cache,
                         Tensor rows, Tensor block_tables, Tensor rope_table,
                         const AttentionShape& shape, Tensor out) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    auto cache_type = FloatType(k_cache, "Attention cache");
    if (!cache_type.ok()) return cache_type.status();
    const int64_t n = rows.rank >= 1 ? rows.dim(0) : 0;
    const int64_t q_width = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
    if (auto st = Expect(
            q.dtype == DType::kF32 && out.dtype == DType::kF32 && rows.dtype == DType::kI32 &&
                block_tables.dtype == DType::kI32 && rope_table.dtype == DType::kF32 &&
                rows.numel() == n * kernels::kAttnRowFields && q.numel() == n * q_width &&
                out.numel() == n * q_width && rope_table.rank == 2 &&
                rope_table.dim(1) == shape.head_dim && shape.block_size > 0 && k_cache.rank == 4 &&
                k_cache.dim(1) == shape.num_kv_heads && k_cache.dim(2) == shape.block_size &&
                k_cache.dim(3) == shape.head_dim && v_cache.dtype == k_cache.dtype &&
                v_cache.rank == 4 && v_cache.shape == k_cache.shape,
            "Attention",
            absl::StrCat("q ", q.DebugString(), " cache ", k_cache.DebugString(), " rows ",
                         rows.DebugString(), " heads ", shape.num_heads, "/", shape.num_kv_heads,
                         " head_dim ", shape.head_dim));
        !st.ok()) {
      return st;
    }
    AttentionParams p = RowParams(q, out, rows, block_tables, rope_table, shape, n);
    p.k_cache = k_cache.data;
    p.v_cache = v_cache.data;
    p.cache_type = *cache_type;
    return RunAttention(*s, p);
  }

  bool SupportsF16Kv() const override { return true; }
  bool SupportsInt8Kv() const override { return true; }
  bool SupportsQ8Weights() const override { return true; }

  absl::Status StoreKvInt8(Stream& stream, Tensor k, Tensor v, Tensor slots, Tensor pages,
                           Tensor seal, const kernels::KvCacheI8& cache) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    auto layer = I8Layer(cache, "StoreKvInt8");
    if (!layer.ok()) return layer.status();
    const int64_t n = slots.numel();
    const int64_t num_seal = seal.empty() ? 0 : seal.numel() / kernels::kSealFields;
    const int64_t kv_dim = layer->kv_dim;
    if (auto st = Expect(slots.dtype == DType::kI32 && pages.dtype == DType::kI32 &&
                             pages.numel() == n && k.dtype == DType::kF32 &&
                             v.dtype == DType::kF32 && k.numel() == n * kv_dim &&
                             v.numel() == n * kv_dim &&
                             (seal.empty() || (seal.dtype == DType::kI32 &&
                                               seal.numel() % kernels::kSealFields == 0)),
                         "StoreKvInt8",
                         absl::StrCat(k.DebugString(), " ", slots.DebugString(), " ",
                                      pages.DebugString(), " ", seal.DebugString()));
        !st.ok()) {
      return st;
    }
    return cuda::StoreKvInt8(static_cast<const float*>(k.data),
                             static_cast<const float*>(v.data),
                             static_cast<const int32_t*>(slots.data),
                             static_cast<const int32_t*>(pages.data), n,
                             static_cast<const kernels::SealEntry*>(seal.data), num_seal, *layer,
                             s->stream());
  }

  absl::Status AttentionInt8(Stream& stream, Tensor q, const kernels::KvCacheI8& cache,
                             Tensor rows, Tensor own, Tensor block_tables, Tensor rope_table,
                             const AttentionShape& shape, Tensor out) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    auto layer = I8Layer(cache, "AttentionInt8");
    if (!layer.ok()) return layer.status();
    const int64_t n = rows.rank >= 1 ? rows.dim(0) : 0;
    const int64_t q_width = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(shape.num_kv_heads) * shape.head_dim;
    if (auto st = Expect(
            q.dtype == DType::kF32 && out.dtype == DType::kF32 && rows.dtype == DType::kI32 &&
                own.dtype == DType::kI32 && block_tables.dtype == DType::kI32 &&
                rope_table.dtype == DType::kF32 &&
                rows.numel() == n * kernels::kAttnRowFields &&
                own.numel() == n * kernels::kAttnOwnFields && q.numel() == n * q_width &&
                out.numel() == n * q_width && rope_table.rank == 2 &&
                rope_table.dim(1) == shape.head_dim && shape.block_size == layer->block_size &&
                layer->kv_dim == kv_dim,
            "AttentionInt8",
            absl::StrCat("q ", q.DebugString(), " codes ", cache.k_codes.DebugString(), " rows ",
                         rows.DebugString(), " own ", own.DebugString(), " heads ",
                         shape.num_heads, "/", shape.num_kv_heads, " head_dim ",
                         shape.head_dim));
        !st.ok()) {
      return st;
    }
    AttentionParams p = RowParams(q, out, rows, block_tables, rope_table, shape, n);
    p.k_cache = layer->k_codes;
    p.v_cache = layer->v_codes;
    p.cache_type = DType::kI8;
    p.k_scale = layer->k_scales;
    p.v_scale = layer->v_scales;
    p.v_group_size = layer->value_group;
    p.fp16_scales = true;
    p.own = static_cast<const kernels::AttnOwnBlock*>(own.data);
    p.k_pages = layer->k_pages;
    p.v_pages = layer->v_pages;
    return RunAttention(*s, p);
  }

  absl::Status SiluMul(Stream& stream, Tensor gate, Tensor up, Tensor out) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    const int64_t n = gate.rank >= 1 ? gate.dim(0) : 0;
    if (auto st = Expect(gate.dtype == DType::kF32 && up.dtype == DType::kF32 &&
                             out.dtype == DType::kF32 && n > 0 && up.numel() == gate.numel() &&
                             out.numel() == gate.numel(),
                         "SiluMul", gate.DebugString());
        !st.ok()) {
      return st;
    }
    const int64_t f = gate.numel() / n;
    return cuda::SiluMul(static_cast<const float*>(gate.data), f,
                         static_cast<const float*>(up.data), f, n, f,
                         static_cast<float*>(out.data), s->stream());
  }

  absl::Status Add(Stream& stream, Tensor a, Tensor b, Tensor out) override {
    KVFOLD_ASSIGN_STREAM(s, stream);
    if (auto st = Expect(a.dtype == DType::kF32 && b.dtype == DType::kF32 &&
                             out.dtype == DType::kF32 && a.numel() == b.numel() &&
                             out.numel() == a.numel(),
                         "Add", a.DebugString());
        !st.ok()) {
      return st;
    }
    return cuda::Add(static_cast<const float*>(a.data), static_cast<const float*>(b.data),
                     a.numel(), static_cast<float*>(out.data), s->stream());
  }

 private:
  // Q8 weights (q8_gemv.cuh): dequantized in registers, F32 activations.
  static absl::Status MatMulQ8(CudaStream& s, Tensor x, Tensor w, Tensor bias, Tensor out) {
    const int64_t m = w.dim(0), k = w.rank == 2 ? w.dim(1) : 0;
    const int64_t n = k > 0 ? x.numel() / k : 0;
    if (auto st = Expect(w.rank == 2 && k > 0 && x.dtype == DType::kF32 &&
                             out.dtype == DType::kF32 && x.numel() == n * k &&
                             out.numel() == n * m && (bias.empty() || bias.numel() == m),
                         "MatMul", x.DebugString() + " x " + w.DebugString() + " -> " +
                                       out.DebugString());
        !st.ok()) {
      return st;
    }
    float* y = static_cast<float*>(out.data);
    if (auto st = Q8Linear(static_cast<const float*>(x.data), n, k,
                           static_cast<const uint8_t*>(w.data), m, 0.0f, y, s.stream());
        !st.ok()) {
      return st;
    }
    if (bias.empty()) return absl::OkStatus();
    auto b_type = FloatType(bias, "MatMul bias");
    if (!b_type.ok()) return b_type.status();
    return AddBias(y, bias.data, *b_type, n, m, s.stream());
  }

  static absl::Status GatherQ8(CudaStream& s, Tensor table, Tensor ids, Tensor out) {
    const int64_t width = table.rank == 2 ? table.dim(1) : 0;
    const int64_t n = ids.numel();
    if (auto st = Expect(width > 0 && ids.dtype == DType::kI32 && out.dtype == DType::kF32 &&
                             out.numel() == n * width,
                         "Gather", table.DebugString() + " " + ids.DebugString() + " " +
                                       out.DebugString());
        !st.ok()) {
      return st;
    }
    return Q8EmbeddingGather(static_cast<const uint8_t*>(table.data), table.dim(0), width,
                             static_cast<const int32_t*>(ids.data), n,
                             static_cast<float*>(out.data), s.stream());
  }

  // Attention on the stream, with the split-K workspace from the stream's scratch.
  static absl::Status RunAttention(CudaStream& s, const AttentionParams& p) {
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    if (AttentionNumSplits(p.num_rows, p.num_kv_heads) > 1) {
      workspace_bytes = AttentionWorkspaceBytes(p.num_heads, p.num_kv_heads, p.head_dim);
      auto ws = s.attention_scratch().Get(workspace_bytes, s.stream());
      if (!ws.ok()) return ws.status();
      workspace = *ws;
    }
    return cuda::Attention(p, workspace, workspace_bytes, s.stream());
  }

  int device_;
};

}  // namespace

}  // namespace kvfold::kernels::cuda

namespace kvfold::kernels {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  using cuda::CudaStatus;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear
    return absl::UnavailableError(absl::StrCat(
        "CUDA backend unavailable: no usable CUDA driver/device (cudaGetDeviceCount: ",
        cudaGetErrorName(err), ": ", cudaGetErrorString(err), "); use --backend cpu"));
  }
  if (count == 0) {
    return absl::UnavailableError("CUDA backend unavailable: no CUDA device; use --backend cpu");
  }
  if (device < 0 || device >= count) {
    return absl::UnavailableError(absl::StrCat("CUDA backend unavailable: device ", device,
                                               " requested but only ", count,
                                               " CUDA device(s) present"));
  }
  cudaDeviceProp prop{};
  if (absl::Status s = CudaStatus(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
      !s.ok()) {
    return absl::UnavailableError(absl::StrCat("CUDA backend unavailable: ", s.message()));
  }
  if (prop.major < 8) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA backend unavailable: device ", device, " (", prop.name, ") has compute capability ",
        prop.major, ".", prop.minor, "; kvfold is built for 8.0 and 9.0"));
  }
  if (absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("CUDA backend unavailable: ", s.message()));
  }
  if (absl::Status s = CudaStatus(cudaFree(nullptr), "CUDA context creation"); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("CUDA backend unavailable: ", s.message()));
  }
  return std::make_unique<cuda::CudaBackend>(device);
}

}  // namespace kvfold::kernels
