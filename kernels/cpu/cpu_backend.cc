// The CPU backend: device memory is host memory; ops run synchronously on the calling
// thread plus a fixed thread pool. Validation of shapes/dtypes happens here, kernels in
// matmul.cc, attention.cc and elementwise.cc.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cpus.h"
#include "core/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cpu/adopted_weights.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/host_memory.h"
#include "kernels/cpu/thread_pool.h"

namespace kvfold::kernels {
namespace {

using cpu::ThreadPool;

class HostBuffer : public Buffer {
 public:
  HostBuffer(void* data, size_t size, bool owned, std::shared_ptr<const void> keepalive,
             std::shared_ptr<cpu::AdoptedWeights> adopted = nullptr)
      : data_(data),
        size_(size),
        owned_(owned),
        keepalive_(std::move(keepalive)),
        adopted_(std::move(adopted)) {
    if (adopted_ != nullptr) adopted_->Add(data_, size_);
  }
  ~HostBuffer() override {
    if (adopted_ != nullptr) adopted_->Remove(data_);
    if (owned_) std::free(data_);
  }
  void* data() const override { return data_; }
  size_t size_bytes() const override { return size_; }

 private:
  void* data_;
  size_t size_;
  bool owned_;
  std::shared_ptr<const void> keepalive_;
  std::shared_ptr<cpu::AdoptedWeights> adopted_;  // set for adopted weights
};

class CpuStream : public Stream {};

absl::Status Check(bool ok, const char* op, const std::string& what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what));
}

// The checks Attention and AttentionInt8 share: shape, rows, rope table, out, and the
// cache width kv_dim. Sets *n (query rows).
bool AttentionCallOk(Tensor q, Tensor rows, Tensor rope_table, const AttentionShape& shape,
                     Tensor out, int64_t kv_dim, int64_t* n) {
  const int64_t q_dim = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  *n = q_dim > 0 ? q.numel() / q_dim : 0;
  return shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0 &&
         shape.head_dim % 2 == 0 && shape.block_size > 0 && rows.dtype == DType::kI32 &&
         rows.numel() == *n * kAttnRowFields && out.numel() == q.numel() &&
         rope_table.rank == 2 && rope_table.dim(1) == shape.head_dim &&
         kv_dim == int64_t{shape.num_kv_heads} * shape.head_dim;
}

// A float KV cache the CPU kernels read: F32 or fp16 [num_blocks, num_kv_heads,
// block_size, head_dim] (FloatKvIndex), K and V of one type and shape.
bool KvCacheOk(Tensor k_cache, Tensor v_cache) {
  return (k_cache.dtype == DType::kF32 || k_cache.dtype == DType::kF16) && k_cache.rank == 4 &&
         v_cache.dtype == k_cache.dtype && v_cache.rank == 4 && v_cache.shape == k_cache.shape;
}

// A KvCacheOk cache laid out for `shape`: its KV heads, block size and head_dim.
bool KvCacheFits(Tensor k_cache, const AttentionShape& shape) {
  return k_cache.dim(1) == shape.num_kv_heads && k_cache.dim(2) == shape.block_size &&
         k_cache.dim(3) == shape.head_dim;
}

// Arguments of the float-cache attention kernels (KvCacheOk caches).
cpu::AttentionArgs FloatAttentionArgs(Tensor q, Tensor k_cache, Tensor v_cache, Tensor rows,
                                      Tensor block_tables, Tensor rope_table,
                                      const AttentionShape& shape, Tensor out, int64_t n) {
  const bool half = k_cache.dtype == DType::kF16;
  cpu::AttentionArgs a{static_cast<const float*>(q.data),
                       half ? nullptr : static_cast<const float*>(k_cache.data),
                       half ? nullptr : static_cast<const float*>(v_cache.data),
                       static_cast<const AttnRow*>(rows.data),
                       static_cast<const int32_t*>(block_tables.data),
                       static_cast<const float*>(rope_table.data),
                       rope_table.dim(0),
                       shape,
                       static_cast<float*>(out.data),
                       n};
  if (half) {
    a.k_half = static_cast<const uint16_t*>(k_cache.data);
    a.v_half = static_cast<const uint16_t*>(v_cache.data);
  }
  return a;
}

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }
// Weight matrices (MatMul's w, Gather's table) may also be Q8 (rank 2: rows are blocked).
bool IsWeight(const Tensor& t) { return IsFloat(t.dtype) || (t.dtype == DType::kQ8 && t.rank == 2); }

// MatMul's view of weight w: m rows of k; k == 0 when w has no rows to multiply by (rank
// below 2, or no rows).
void WeightShape(const Tensor& w, int64_t* m, int64_t* k) {
  *m = w.rank >= 2 ? w.dim(0) : 0;
  *k = *m > 0 ? w.numel() / *m : 0;
}

// Validates the tensors of a KvCacheI8 against each other (backend.h) and returns its sizes.
absl::Status CheckI8Cache(const KvCacheI8& c, const char* op, int64_t* kv_dim, int64_t* bs,
                          int64_t* num_blocks, int64_t* num_pages, int64_t* v_groups) {
  *num_blocks = c.k_codes.dim(0);
  *bs = c.k_codes.dim(1);
  *kv_dim = c.k_codes.rank == 3 ? c.k_codes.dim(2) : 0;
  *num_pages = c.k_pages.dim(0);
  *v_groups = c.value_group >= 1 ? (*kv_dim + c.value_group - 1) / c.value_group : 0;
  const bool ok = c.k_codes.dtype == DType::kI8 && c.v_codes.dtype == DType::kI8 &&
                  c.k_scales.dtype == DType::kF16 && c.v_scales.dtype == DType::kF16 &&
                  c.k_pages.dtype == DType::kF32 && c.v_pages.dtype == DType::kF32 && *kv_dim > 0 &&
                  *v_groups > 0 && c.v_codes.numel() == c.k_codes.numel() &&
                  c.k_scales.numel() == *num_blocks * *kv_dim &&
                  c.v_scales.numel() == *num_blocks * *bs * *v_groups && c.k_pages.rank == 3 &&
                  c.k_pages.dim(1) == *bs && c.k_pages.dim(2) == *kv_dim &&
                  c.v_pages.numel() == c.k_pages.numel();
  if (ok) return absl::OkStatus();  // (the message below allocates)
  return Check(false, op,
               "inconsistent int8 cache " + c.k_codes.DebugString() + " " +
                   c.k_scales.DebugString() + " " + c.v_scales.DebugString() + " " +
                   c.k_pages.DebugString() + " group " + std::to_string(c.value_group));
}

// Alignment of weights the kernels read (AdoptWeights) and of Allocate's buffers.
constexpr uintptr_t kWeightAlignment = 64;

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : reference_(options.reference),
        pool_(options.reference ? 1
                                : (options.num_threads > 0
                                       ? options.num_threads
                                       : AvailableCpus())) {}

  std::string Name() const override { return reference_ ? "cpu-ref" : "cpu"; }
  bool HostAddressable() const override { return true; }
  // Row by row as the pool's threads claim them (rows of the same work: guided claims).
  void ParallelForHost(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn) override {
    if (n <= 0) return;
    if (reference_ || n < 2) return fn(0, n);
    auto body = [&fn](int64_t begin, int64_t end, int) { fn(begin, end); };
    pool_.ParallelFor(n, 1, body);
  }
  bool SupportsQ8Weights() const override { return true; }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) override {
    return NewBuffer(bytes, nullptr);
  }

  // Aliases `host` when it is 64-byte aligned; otherwise copies the weights into aligned
  // memory (docs/engine.md "Weights in memory": a 512-bit load that straddles two cache
  // lines halves the matmul tiles' load throughput, and a llama2.c checkpoint puts every
  // tensor 28 bytes past a line).
  absl::StatusOr<std::unique_ptr<Buffer>> AdoptWeights(
      const void* host, size_t bytes, std::shared_ptr<const void> keepalive) override {
    if (reinterpret_cast<uintptr_t>(host) % kWeightAlignment == 0 || bytes == 0) {
      return std::make_unique<HostBuffer>(const_cast<void*>(host), bytes, false,
                                          std::move(keepalive), adopted_);
    }
    absl::StatusOr<std::unique_ptr<Buffer>> copy = NewBuffer(bytes, adopted_);
    if (!copy.ok()) return copy.status();
    std::memcpy((*copy)->data(), host, bytes);
    return copy;
  }

  void Populate(Tensor t) override { cpu::PopulateHost(t.data, t.size_bytes()); }

  std::unique_ptr<Stream> CreateStream() override { return std::make_unique<CpuStream>(); }

  absl::Status CopyToDevice(Stream&, const void* host, Tensor dst) override {
    if (dst.size_bytes() > 0) std::memcpy(dst.data, host, dst.size_bytes());
    return absl::OkStatus();
  }
  absl::Status CopyToHost(Stream&, Tensor src, void* host) override {
    if (src.size_bytes() > 0) std::memcpy(host, src.data, src.size_bytes());
    return absl::OkStatus();
  }
  absl::Status Copy(Stream&, Tensor src, Tensor dst) override {
    if (src.size_bytes() != dst.size_bytes() || src.dtype != dst.dtype) {
      return Check(false, "Copy", src.DebugString() + " -> " + dst.DebugString());
    }
    std::memmove(dst.data, src.data, src.size_bytes());
    return absl::OkStatus();
  }
  absl::Status Synchronize(Stream&) override { return absl::OkStatus(); }

  absl::Status Gather(Stream&, Tensor table, Tensor ids, Tensor out) override {
    const int64_t width = table.numel() / table.dim(0);
    if (!IsWeight(table) || ids.dtype != DType::kI32 || out.dtype != DType::kF32 ||
        out.numel() != ids.numel() * width) {
      return Check(false, "Gather",
                   table.DebugString() + " " + ids.DebugString() + " " + out.DebugString());
    }
    return cpu::GatherRows(table.data, table.dtype, table.dim(0), width,
                           static_cast<const int32_t*>(ids.data), ids.numel(),
                           static_cast<float*>(out.data));
  }

  absl::Status RmsNorm(Stream&, Tensor x, Tensor weight, float eps, Tensor out) override {
    const int64_t d = weight.numel();
    if (x.dtype != DType::kF32 || out.dtype != DType::kF32 || !IsFloat(weight.dtype) ||
        d == 0 || x.numel() % d != 0 || out.numel() != x.numel()) {
      return Check(false, "RmsNorm", x.DebugString() + " " + weight.DebugString());
    }
    cpu::RmsNormRows(static_cast<const float*>(x.data), weight.data, weight.dtype, eps,
                     x.numel() / d, d, static_cast<float*>(out.data));
    return absl::OkStatus();
  }

  absl::Status MatMul(Stream&, Tensor x, Tensor w, Tensor bias, Tensor out) override {
    cpu::MatMulArgs a;
    KVFOLD_RETURN_IF_ERROR(MatMulArgsOf(x, w, bias, out, &a));
    if (reference_) {
      cpu::MatMulReference(a, matmul_scratch_);
    } else {
      a.w_panels = KeptPanels(a);
      cpu::MatMulOptimized(pool_, a, matmul_scratch_);
    }
    return absl::OkStatus();
  }

  absl::Status MatMuls(Stream& stream, Tensor x, const MatMulProduct* products,
                       int num_products) override {
    if (reference_ || num_products > cpu::kMaxQ8Products) {
      return Backend::MatMuls(stream, x, products, num_products);
    }
    std::array<cpu::MatMulArgs, cpu::kMaxQ8Products> a;
    for (int p = 0; p < num_products; ++p) {
      const MatMulProduct& product = products[p];
      KVFOLD_RETURN_IF_ERROR(MatMulArgsOf(x, product.w, product.bias, product.out, &a[p]));
      a[p].w_panels = KeptPanels(a[p]);
    }
    cpu::MatMulOptimizedProducts(pool_, a.data(), num_products, matmul_scratch_);
    return absl::OkStatus();
  }

  absl::Status PrepareMatMulWeight(Tensor w) override {
    int64_t m, k;
    WeightShape(w, &m, &k);
    if (!IsWeight(w) || k == 0) return Check(false, "PrepareMatMulWeight", w.DebugString());
    // Weights not adopted (or panels that cannot be allocated) stay with MatMul's per-call
    // layout, as without this call.
    if (!reference_) KeptPanels({nullptr, w.data, w.dtype, nullptr, nullptr, 1, m, k});
    return absl::OkStatus();
  }

  absl::Status Rope(Stream&, Tensor x, Tensor positions, Tensor rope_table,
                    Tensor out) override {
    const int64_t hd = rope_table.rank == 2 ? rope_table.dim(1) : 0;
    const int64_t n = positions.numel();
    if (x.dtype != DType::kF32 || out.dtype != DType::kF32 || positions.dtype != DType::kI32 ||
        hd == 0 || hd % 2 != 0 || n == 0 || x.numel() % (n * hd) != 0 ||
        out.numel() != x.numel()) {
      return Check(false, "Rope", x.DebugString() + " " + rope_table.DebugString());
    }
    return cpu::RopeRows(static_cast<const float*>(x.data),
                         static_cast<const int32_t*>(positions.data),
                         static_cast<const float*>(rope_table.data), rope_table.dim(0), n,
                         x.numel() / (n * hd), hd, static_cast<float*>(out.data));
  }

  absl::Status StoreKv(Stream&, Tensor k, Tensor v, Tensor slots, Tensor k_cache,
                       Tensor v_cache) override {
    const int64_t n = slots.numel();
    if (!KvCacheOk(k_cache, v_cache)) {
      return Check(false, "StoreKv", k.DebugString() + " " + k_cache.DebugString());
    }
    const int64_t heads = k_cache.dim(1), bs = k_cache.dim(2), hd = k_cache.dim(3);
    const int64_t kv_dim = heads * hd, num_slots = k_cache.dim(0) * bs;
    if (slots.dtype != DType::kI32 || kv_dim == 0 || k.dtype != DType::kF32 ||
        v.dtype != DType::kF32 || k.numel() != n * kv_dim || v.numel() != n * kv_dim) {
      return Check(false, "StoreKv", k.DebugString() + " " + k_cache.DebugString());
    }
    const int32_t* s = static_cast<const int32_t*>(slots.data);
    for (int64_t i = 0; i < n; ++i) {
      if (s[i] < 0 || s[i] >= num_slots) {
        return absl::OutOfRangeError(absl::StrCat("StoreKv: slot ", s[i], " out of range"));
      }
    }
    const float* kf = static_cast<const float*>(k.data);
    const float* vf = static_cast<const float*>(v.data);
    const bool half = k_cache.dtype == DType::kF16;
    auto store = [&](int64_t r0, int64_t r1, int) {
      if (half) {
        cpu::StoreKvHalf(kf + r0 * kv_dim, vf + r0 * kv_dim, s + r0, r1 - r0, heads, bs, hd,
                         static_cast<uint16_t*>(k_cache.data),
                         static_cast<uint16_t*>(v_cache.data));
      } else {
        cpu::StoreKvF32(kf + r0 * kv_dim, vf + r0 * kv_dim, s + r0, r1 - r0, heads, bs, hd,
                        static_cast<float*>(k_cache.data), static_cast<float*>(v_cache.data));
      }
    };
    ForRows(n, store);
    return absl::OkStatus();
  }

  absl::Status Attention(Stream&, Tensor q, Tensor k_cache, Tensor v_cache, Tensor rows,
                         Tensor block_tables, Tensor rope_table, const AttentionShape& shape,
                         Tensor out) override {
    int64_t n;
    if (!KvCacheOk(k_cache, v_cache) || !KvCacheFits(k_cache, shape) ||
        !AttentionCallOk(q, rows, rope_table, shape, out, k_cache.dim(1) * k_cache.dim(3), &n)) {
      return Check(false, "Attention", q.DebugString() + " " + k_cache.DebugString() + " " +
                                           rows.DebugString());
    }
    const cpu::AttentionArgs a =
        FloatAttentionArgs(q, k_cache, v_cache, rows, block_tables, rope_table, shape, out, n);
    if (reference_) {
      cpu::AttentionReference(a, ref_scratch_);
    } else {
      cpu::AttentionOptimized(pool_, a, opt_scratch_);
    }
    return absl::OkStatus();
  }

  absl::Status AttentionPart(Stream&, Tensor q, Tensor k_cache, Tensor v_cache, Tensor rows,
                             Tensor block_tables, Tensor rope_table, const AttentionShape& shape,
                             int64_t key_begin, int64_t key_end, Tensor state,
                             Tensor out) override {
    if (reference_) return absl::UnimplementedError("cpu-ref: resumable attention not implemented");
    int64_t n;
    if (!KvCacheOk(k_cache, v_cache) || !KvCacheFits(k_cache, shape) ||
        !AttentionCallOk(q, rows, rope_table, shape, out, k_cache.dim(1) * k_cache.dim(3), &n) ||
        state.dtype != DType::kF32 ||
        state.numel() != n * shape.num_heads * (int64_t{shape.head_dim} + 2) || key_begin < 0 ||
        key_end <= key_begin || key_begin % kAttentionPartKeys != 0 ||
        key_end % kAttentionPartKeys != 0) {
      return Check(false, "AttentionPart",
                   absl::StrCat(q.DebugString(), " ", state.DebugString(), " keys [", key_begin,
                                ", ", key_end, ")"));
    }
    const cpu::AttentionPart part{key_begin, key_end, static_cast<float*>(state.data)};
    cpu::AttentionOptimized(
        pool_,
        FloatAttentionArgs(q, k_cache, v_cache, rows, block_tables, rope_table, shape, out, n),
        opt_scratch_, &part);
    return absl::OkStatus();
  }

  bool SupportsF16Kv() const override { return true; }
  bool SupportsInt8Kv() const override { return true; }

  absl::Status StoreKvInt8(Stream&, Tensor k, Tensor v, Tensor slots, Tensor pages, Tensor seal,
                           const KvCacheI8& c) override {
    int64_t kv_dim, bs, num_blocks, num_pages, v_groups;
    if (absl::Status st =
            CheckI8Cache(c, "StoreKvInt8", &kv_dim, &bs, &num_blocks, &num_pages, &v_groups);
        !st.ok()) {
      return st;
    }
    const int64_t n = slots.numel();
    const int64_t num_seal = seal.empty() ? 0 : seal.numel() / kSealFields;
    if (slots.dtype != DType::kI32 || pages.dtype != DType::kI32 || pages.numel() != n ||
        k.dtype != DType::kF32 || v.dtype != DType::kF32 || k.numel() != n * kv_dim ||
        v.numel() != n * kv_dim ||
        (!seal.empty() && (seal.dtype != DType::kI32 || seal.numel() % kSealFields != 0))) {
      return Check(false, "StoreKvInt8",
                   k.DebugString() + " " + slots.DebugString() + " " + pages.DebugString() + " " +
                       seal.DebugString());
    }
    const int32_t* sl = static_cast<const int32_t*>(slots.data);
    const int32_t* pg = static_cast<const int32_t*>(pages.data);
    const SealEntry* se = static_cast<const SealEntry*>(seal.data);
    for (int64_t i = 0; i < n; ++i) {
      if (sl[i] < 0 || sl[i] >= num_blocks * bs || pg[i] < 0 || pg[i] >= num_pages) {
        return absl::OutOfRangeError(
            absl::StrCat("StoreKvInt8: slot ", sl[i], " / page ", pg[i], " out of range"));
      }
    }
    for (int64_t i = 0; i < num_seal; ++i) {
      const SealEntry& f = se[i];
      if (f.block < 0 || f.block >= num_blocks || f.page < 0 || f.page >= num_pages ||
          f.count < 0 || f.count > bs) {
        return absl::OutOfRangeError(absl::StrCat("StoreKvInt8: bad seal (block ", f.block,
                                                  ", page ", f.page, ", count ", f.count, ")"));
      }
    }
    float* kp = static_cast<float*>(c.k_pages.data);
    float* vp = static_cast<float*>(c.v_pages.data);
    const size_t scratch = static_cast<size_t>(std::max(kv_dim, bs * v_groups));
    if (seal_scratch_.size() < scratch) seal_scratch_.resize(scratch);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t dst = (int64_t{pg[i]} * bs + sl[i] % bs) * kv_dim;
      std::memcpy(kp + dst, static_cast<const float*>(k.data) + i * kv_dim, kv_dim * sizeof(float));
      std::memcpy(vp + dst, static_cast<const float*>(v.data) + i * kv_dim, kv_dim * sizeof(float));
    }
    for (int64_t i = 0; i < num_seal; ++i) {
      const int64_t b = se[i].block, p = se[i].page;
      cpu::SealBlockInt8(
          kp + p * bs * kv_dim, vp + p * bs * kv_dim, se[i].count, static_cast<int>(kv_dim),
          c.value_group, static_cast<int8_t*>(c.k_codes.data) + b * bs * kv_dim,
          static_cast<uint16_t*>(c.k_scales.data) + b * kv_dim,
          static_cast<int8_t*>(c.v_codes.data) + b * bs * kv_dim,
          static_cast<uint16_t*>(c.v_scales.data) + b * bs * v_groups, seal_scratch_.data());
    }
    return absl::OkStatus();
  }

  absl::Status AttentionInt8(Stream&, Tensor q, const KvCacheI8& c, Tensor rows, Tensor own,
                             Tensor block_tables, Tensor rope_table, const AttentionShape& shape,
                             Tensor out) override {
    int64_t kv_dim, bs, num_blocks, num_pages, v_groups;
    if (absl::Status st =
            CheckI8Cache(c, "AttentionInt8", &kv_dim, &bs, &num_blocks, &num_pages, &v_groups);
        !st.ok()) {
      return st;
    }
    int64_t n;
    if (!AttentionCallOk(q, rows, rope_table, shape, out, kv_dim, &n) ||
        shape.block_size != bs || own.dtype != DType::kI32 || own.numel() != n * kAttnOwnFields) {
      return Check(false, "AttentionInt8",
                   q.DebugString() + " " + c.k_codes.DebugString() + " " + rows.DebugString() +
                       " " + own.DebugString());
    }
    cpu::AttentionArgsI8 a{static_cast<const float*>(q.data),
                           static_cast<const int8_t*>(c.k_codes.data),
                           static_cast<const int8_t*>(c.v_codes.data),
                           static_cast<const uint16_t*>(c.k_scales.data),
                           static_cast<const uint16_t*>(c.v_scales.data),
                           static_cast<const float*>(c.k_pages.data),
                           static_cast<const float*>(c.v_pages.data),
                           c.value_group,
                           static_cast<int>(v_groups),
                           static_cast<const AttnRow*>(rows.data),
                           static_cast<const AttnOwnBlock*>(own.data),
                           static_cast<const int32_t*>(block_tables.data),
                           static_cast<const float*>(rope_table.data),
                           rope_table.dim(0),
                           shape,
                           static_cast<float*>(out.data),
                           n};
    if (reference_) {
      cpu::AttentionInt8Reference(a, ref_scratch_);
    } else {
      cpu::AttentionInt8Optimized(pool_, a, opt_scratch_);
    }
    return absl::OkStatus();
  }

  absl::Status SiluMul(Stream&, Tensor gate, Tensor up, Tensor out) override {
    if (gate.numel() != up.numel() || out.numel() != gate.numel()) {
      return Check(false, "SiluMul", gate.DebugString() + " " + up.DebugString());
    }
    const float* g = static_cast<const float*>(gate.data);
    const float* u = static_cast<const float*>(up.data);
    float* o = static_cast<float*>(out.data);
    ForElements(gate.numel(),
                [&](int64_t b, int64_t e) { cpu::SiluMulRows(g + b, u + b, e - b, o + b); });
    return absl::OkStatus();
  }

  absl::Status Add(Stream&, Tensor a, Tensor b, Tensor out) override {
    if (a.numel() != b.numel() || out.numel() != a.numel()) {
      return Check(false, "Add", a.DebugString() + " " + b.DebugString());
    }
    const float* x = static_cast<const float*>(a.data);
    const float* y = static_cast<const float*>(b.data);
    float* o = static_cast<float*>(out.data);
    ForElements(a.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = x[i] + y[i];
    });
    return absl::OkStatus();
  }

 private:
  // MatMul's arguments for out = x @ w^T (+ bias), or InvalidArgument naming the shapes.
  absl::Status MatMulArgsOf(Tensor x, Tensor w, Tensor bias, Tensor out, cpu::MatMulArgs* a) {
    int64_t m, k;
    WeightShape(w, &m, &k);
    const int64_t n = k > 0 ? x.numel() / k : 0;
    if (x.dtype != DType::kF32 || out.dtype != DType::kF32 || !IsWeight(w) || k == 0 ||
        x.numel() != n * k || out.numel() != n * m ||
        (!bias.empty() && (bias.dtype != DType::kF32 || bias.numel() != m))) {
      return Check(false, "MatMul",
                   x.DebugString() + " @ " + w.DebugString() + "^T -> " + out.DebugString());
    }
    *a = cpu::MatMulArgs{
        static_cast<const float*>(x.data), w.data, w.dtype, static_cast<const float*>(bias.data),
        static_cast<float*>(out.data),     n,      m,       k};
    return absl::OkStatus();
  }

  // fn(begin, end) over [0, count) elements: on the pool in pieces of whole 16-element
  // vectors when the op is large (a batched step's SiLU runs over 16 x 2048 values), else
  // on the calling thread. Elementwise ops give each element the same operations wherever
  // a piece starts (SiluMulRows pads only the tail), so the split never changes a bit.
  template <class Fn>
  void ForElements(int64_t count, Fn fn) {
    constexpr int64_t kPiece = 4096, kMinParallel = 4 * kPiece;
    if (reference_ || count < kMinParallel) return fn(0, count);
    auto body = [&](int64_t p0, int64_t p1, int) {
      fn(p0 * kPiece, std::min(count, p1 * kPiece));
    };
    pool_.ParallelFor((count + kPiece - 1) / kPiece, 1, body);
  }

  // fn(r0, r1, thread) over [0, n) rows, in one piece per thread when there are at least
  // kMinParallelRows, else on the calling thread. For work whose rows are independent
  // (each written by one thread, the same operations wherever a piece starts): a batched
  // step's KV store writes each of its rows' keys and values to lines not in cache, and
  // one thread waited for them all (docs/engine-measurements.md, "The KV store of a batched step").
  template <class Fn>
  void ForRows(int64_t n, Fn& fn) {
    constexpr int64_t kMinParallelRows = 4;
    if (reference_ || n < kMinParallelRows) return fn(0, n, 0);
    pool_.ParallelFor(n, (n + pool_.num_threads() - 1) / pool_.num_threads(), fn);
  }

  // The panels the backend keeps for a's weights when a's MatMul reads panels and the
  // weights are adopted (laid out on first use); nullptr otherwise (matmul_tiles.h
  // CallPanels then lays them out per call). Depends on a's weight shape only.
  const uint8_t* KeptPanels(const cpu::MatMulArgs& a) {
    const cpu::PanelKind kind = cpu::MatMulPanels(a);
    return kind == cpu::PanelKind::kNone ? nullptr : adopted_->Panels(pool_, kind, a.w, a.m, a.k);
  }

  // An owned buffer of `bytes` from cpu::AllocateHost (registered with `adopted` when
  // given: adopted weights copied for alignment).
  static absl::StatusOr<std::unique_ptr<Buffer>> NewBuffer(
      size_t bytes, std::shared_ptr<cpu::AdoptedWeights> adopted) {
    static_assert(kWeightAlignment <= 64, "AllocateHost aligns to 64 bytes");
    void* p = cpu::AllocateHost(std::max<size_t>(bytes, 1));
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", bytes, " bytes"));
    }
    return std::make_unique<HostBuffer>(p, bytes, true, nullptr, std::move(adopted));
  }

  bool reference_;
  ThreadPool pool_;
  std::vector<float> ref_scratch_;
  cpu::MatMulScratch matmul_scratch_;
  std::shared_ptr<cpu::AdoptedWeights> adopted_ = std::make_shared<cpu::AdoptedWeights>();
  cpu::AttentionScratch opt_scratch_;
  std::vector<float> seal_scratch_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace kvfold::kernels
