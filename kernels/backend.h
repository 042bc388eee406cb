// The Backend interface: every numeric op the engine runs, on memory the backend owns.
//
// Design (docs/engine.md has the long form):
// - Memory is explicit. A Backend allocates Buffers; a Tensor is a typed, shaped VIEW into
//   a Buffer (or into weights the backend adopted). Tensor::data is a DEVICE address: the
//   CPU backend's device memory is host RAM, the CUDA backend's is GPU memory. Ops never
//   receive host pointers; the only host<->device traffic is CopyToDevice/CopyToHost.
// - Ops are enqueued on a Stream. The CPU backend runs them synchronously (its Stream is a
//   thread pool handle); the CUDA backend launches them on a cudaStream_t. A host buffer
//   passed to CopyToHost is valid only after Synchronize(stream).
// - Every op returns absl::Status: InvalidArgument for shape/dtype mismatches (checked by
//   the launcher before any work), Internal for device failures. Ops never allocate on
//   the steady-state path (the CPU backend keeps per-thread scratch that only grows when a
//   context longer than any before is seen).
// - Batch invariance: each output row of MatMul/RmsNorm/Attention/... is computed with an
//   accumulation order that depends only on that row's data, never on how many rows are
//   in the call or where the row sits. This is what makes prefill of n tokens and n
//   single-token decodes bit-identical (docs/contracts.md, "Bitwise rule").
//
// Shapes in comments are [rows, cols] in elements; all activations are F32; weights may be
// F32, F16 or BF16 (converted on the fly); KV cache entries are F32 (or INT8 codes with
// F32 scales, KvCacheI8) and UN-ROTATED.
#ifndef KVFOLD_KERNELS_BACKEND_H_
#define KVFOLD_KERNELS_BACKEND_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "kernels/attn_rows.h"

namespace kvfold::kernels {

// The element types and their storage (core/dtype.h) are the project's one DType; the
// kernels name them unqualified.
using core::DType;
using core::DTypeName;
using core::DTypeSize;
using core::kQ8Block;
using core::Q8RowBytes;
using core::StorageBytes;

// A block of device memory. Freed when destroyed (the backend must outlive it).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() const = 0;  // device address
  virtual size_t size_bytes() const = 0;
};

// A non-owning typed view. rank <= 4; shape[i] for i >= rank is 1. Row-major, contiguous.
struct Tensor {
  void* data = nullptr;  // device address; nullptr means "absent" (e.g. no bias)
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, 4> shape = {1, 1, 1, 1};

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  size_t size_bytes() const {
    return StorageBytes(dtype, numel(), rank > 0 ? shape[rank - 1] : 1);
  }
  int64_t dim(int i) const { return shape[i]; }
  // Rows [row_begin, row_begin + num_rows) along dim 0.
  Tensor Rows(int64_t row_begin, int64_t num_rows) const;
  // Same memory, new shape (numel must match; CHECKed).
  Tensor Reshape(std::initializer_list<int64_t> new_shape) const;
  std::string DebugString() const;
};

Tensor MakeTensor(void* data, DType dtype, std::initializer_list<int64_t> shape);
// A view of `buffer` starting at byte `offset`; CHECKs that it fits.
Tensor ViewOf(const Buffer& buffer, size_t offset, DType dtype,
              std::initializer_list<int64_t> shape);

// Opaque per-backend execution context (CUDA: a stream + cuBLAS handle; CPU: thread pool).
class Stream {
 public:
  virtual ~Stream() = default;
};

// RoPE is applied from a precomputed table: rope_table [max_positions, head_dim] F32 where
// row p holds cos(p * inv_freq[i]) in [0, head_dim/2) and sin(...) in [head_dim/2,
// head_dim). Convention: HF rotate_half (pairs (i, i + head_dim/2)).

// Key-slice alignment of Backend::AttentionPart.
inline constexpr int kAttentionPartKeys = 16;

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;  // num_heads % num_kv_heads == 0 (GQA)
  int head_dim = 0;      // even
  int block_size = 0;    // KV pool block size in tokens
  float scale = 0.0f;    // usually 1/sqrt(head_dim)
};

// FloatKvIndex (attn_rows.h) of a cache laid out for `s`.
inline int64_t FloatKvIndex(int64_t slot, int64_t kvh, int64_t d, const AttentionShape& s) {
  return FloatKvIndex(slot, kvh, d, s.num_kv_heads, s.block_size, s.head_dim);
}

// One layer of an INT8 KV cache (KIVI, kernels/quant/kv_quant.h; docs/engine.md "INT8
// KV"). A block's entries live in an F32 residual PAGE while the block is open; when it is
// complete (or sealed) StoreKvInt8 quantizes it into codes + scales: keys per channel over
// the block's tokens (one key group = one block), values per token in groups of
// `value_group` channels. kv_dim = num_kv_heads * head_dim. Scales are F16: rounded to fp16
// before the codes are computed (KvQuantOptions::fp16_scales), so storing them loses
// nothing.
struct KvCacheI8 {
  Tensor k_codes;        // [num_blocks, block_size, kv_dim] I8
  Tensor v_codes;        // [num_blocks, block_size, kv_dim] I8
  Tensor k_scales;       // [num_blocks, kv_dim] F16
  Tensor v_scales;       // [num_blocks, block_size, NumValueGroups(kv_dim, value_group)] F16
  Tensor k_pages;        // [num_pages, block_size, kv_dim] F32 (entries of open blocks)
  Tensor v_pages;        // [num_pages, block_size, kv_dim] F32
  int value_group = 32;  // channels per value scale, >= 1
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string Name() const = 0;  // "cpu", "cpu-ref", "cuda:0"

  // Memory ------------------------------------------------------------------------------
  // ResourceExhausted when the device is out of memory. Contents are uninitialised.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t bytes) = 0;
  // Backs the memory of `t` (a view of an Allocate'd buffer) now, contents unchanged, so
  // that its first writes later (in a decode step) do not stop on page faults. Advice
  // only: the default does nothing (device memory is backed when allocated); the CPU
  // backend populates the host pages (cpu/host_memory.h PopulateHost).
  virtual void Populate(Tensor t) {}
  // Makes read-only weight data (host memory, e.g. an mmap) available on the device. The
  // CPU backend aliases 64-byte aligned `host` (zero copy) and keeps `keepalive` alive as
  // long as the returned Buffer, and copies unaligned weights into aligned memory (then
  // drops `keepalive`); a device backend copies and may drop `keepalive` at once.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> AdoptWeights(
      const void* host, size_t bytes, std::shared_ptr<const void> keepalive) = 0;
  virtual std::unique_ptr<Stream> CreateStream() = 0;
  // Whether device addresses are host addresses: a kernel may then write its output
  // straight into host memory (a MakeTensor view of it) instead of into an Allocate'd
  // buffer followed by CopyToHost. The CPU backend's are; a device's are not.
  virtual bool HostAddressable() const { return false; }
  // Calls fn(begin, end) over disjoint ranges covering [0, n), on the host threads the
  // backend computes with where it has them (the CPU backend's pool), else on the calling
  // thread, and returns when all have run. For independent host work per row between ops
  // (a decode step's token picks: docs/engine.md, "Sampling"); fn must not call the
  // backend. Not reentrant, like the ops.
  virtual void ParallelForHost(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn) {
    if (n > 0) fn(0, n);
  }
  // Host <-> device transfers of dst.size_bytes() / src.size_bytes() bytes.
  virtual absl::Status CopyToDevice(Stream& stream, const void* host, Tensor dst) = 0;
  virtual absl::Status CopyToHost(Stream& stream, Tensor src, void* host) = 0;
  // Device -> device copy of src into dst (same dtype and numel).
  virtual absl::Status Copy(Stream& stream, Tensor src, Tensor dst) = 0;
  virtual absl::Status Synchronize(Stream& stream) = 0;

  // Ops ---------------------------------------------------------------------------------
  // out[i, :] = F32(table[ids[i], :]). table [num_rows, width] any float dtype (or Q8 on
  // backends that SupportsQ8Weights),
  // ids [n] I32 (each in range; OutOfRange otherwise on CPU, undefined on device),
  // out [n, width] F32. Used for the token embedding and to gather rows of activations.
  virtual absl::Status Gather(Stream& stream, Tensor table, Tensor ids, Tensor out) = 0;

  // out = x / sqrt(mean(x^2) + eps) * weight, per row. x, out [n, d] F32; weight [d].
  virtual absl::Status RmsNorm(Stream& stream, Tensor x, Tensor weight, float eps,
                               Tensor out) = 0;

  // out = x @ w^T (+ bias). x [n, k] F32; w [m, k] F32/F16/BF16 (Q8 on backends that
  // SupportsQ8Weights); bias [m] or empty;
  // out [n, m] F32. Batch-invariant: row i of out is bit-identical for every n.
  virtual absl::Status MatMul(Stream& stream, Tensor x, Tensor w, Tensor bias,
                              Tensor out) = 0;
  // One x through several weights (a layer's q, k and v, or its gate and up projections):
  // products[i].out = x @ products[i].w^T (+ products[i].bias), each with MatMul's
  // contract and bits. A backend may share the work that depends on x alone (the CPU
  // backend quantizes x once for Q8 weights and runs the products in one pass of its
  // threads); by default, MatMul per product in order, stopping at the first error.
  struct MatMulProduct {
    Tensor w;
    Tensor bias;  // or empty
    Tensor out;
  };
  virtual absl::Status MatMuls(Stream& stream, Tensor x, const MatMulProduct* products,
                               int num_products);
  // Lays out now whatever a backend derives from the adopted weight w for its MatMul (the
  // CPU backend's Q8 panels), which MatMul would otherwise do on w's first call: a model
  // load then pays for it instead of its first request. Optional (MatMul works without
  // it); InvalidArgument for a w MatMul would reject.
  virtual absl::Status PrepareMatMulWeight(Tensor w) { return absl::OkStatus(); }

  // Rotates each head of x by its row's position (HF rotate_half). x, out [n, heads,
  // head_dim] F32 (may alias); positions [n] I32 in [0, rope_table rows).
  virtual absl::Status Rope(Stream& stream, Tensor x, Tensor positions, Tensor rope_table,
                            Tensor out) = 0;

  // Writes k, v [n, num_kv_heads * head_dim] into the paged caches at physical slots
  // slots[i] (I32, slot = block * block_size + offset). k_cache, v_cache [num_blocks,
  // num_kv_heads, block_size, head_dim] F32 (or F16 where SupportsF16Kv; FloatKvIndex).
  // Keys are stored UN-ROTATED. The slots of one call are distinct (each a new entry of
  // its sequence): backends write the rows in parallel, in no order.
  virtual absl::Status StoreKv(Stream& stream, Tensor k, Tensor v, Tensor slots,
                               Tensor k_cache, Tensor v_cache) = 0;

  // Paged GQA attention over StoreKv's caches, whose dims 1-3 are shape's num_kv_heads,
  // block_size and head_dim. q [n, num_heads * head_dim] already rotated by its position;
  // rows [n, kAttnRowFields] I32 holding n AttnRow records (attn_rows.h); block_tables
  // [*] I32; each visible key is rotated by its position from rope_table inside the op.
  // out [n, num_heads * head_dim].
  // Keys are visited prefix first, then main, in index order; softmax in F32 with the
  // row max subtracted; all identical for a row whatever else is in the batch.
  virtual absl::Status Attention(Stream& stream, Tensor q, Tensor k_cache, Tensor v_cache,
                                 Tensor rows, Tensor block_tables, Tensor rope_table,
                                 const AttentionShape& shape, Tensor out) = 0;

  // Attention resumable across calls: key indices [key_begin, key_end) of every row, both
  // multiples of kAttentionPartKeys (key_end may also lie past every row's keys), each
  // (row, head)'s online softmax carried in `state` (F32 [n, num_heads * (head_dim + 2)])
  // from the slice before (key_begin 0: fresh). Slices [0, a), [a, b), ... up to the
  // largest row's key count leave in `out` exactly the bits of one Attention call; `out`
  // is complete only after the last slice. Unimplemented where not supported (callers
  // run Attention whole).
  virtual absl::Status AttentionPart(Stream& stream, Tensor q, Tensor k_cache, Tensor v_cache,
                                     Tensor rows, Tensor block_tables, Tensor rope_table,
                                     const AttentionShape& shape, int64_t key_begin,
                                     int64_t key_end, Tensor state, Tensor out) {
    return absl::UnimplementedError(Name() + ": resumable attention not implemented");
  }

  // false: MatMul and Gather reject Q8 weights with InvalidArgument.
  virtual bool SupportsQ8Weights() const { return false; }

  // true: StoreKv, Attention (and AttentionPart where implemented) take F16 caches (each
  // value rounded to the nearest fp16 as it is stored, widened to F32 as it is read).
  // false: the engine refuses kv_dtype f16.
  virtual bool SupportsF16Kv() const { return false; }

  // INT8 KV (KvCacheI8) ------------------------------------------------------------------
  // false: the two ops below return Unimplemented (the engine refuses kv_dtype int8).
  virtual bool SupportsInt8Kv() const { return false; }

  // 1. Writes k, v [n, kv_dim] F32 rows into the F32 pages: row i goes to page pages[i]
  //    (I32 [n]) at offset slots[i] % block_size. 2. Then quantizes each block of `seal`
  //    (I32 [num_seal, kSealFields]: SealEntry records, attn_rows.h; may be empty):
  //    entries [0, count) of page `page` become the block's codes and scales
  //    (kernels/quant/kv_quant.h, bit for bit: keys QuantizeKeys with group_size = count,
  //    values QuantizeValues with value_group, both with fp16_scales).
  virtual absl::Status StoreKvInt8(Stream& stream, Tensor k, Tensor v, Tensor slots, Tensor pages,
                                   Tensor seal, const KvCacheI8& cache) {
    return absl::UnimplementedError(Name() + ": INT8 KV cache not implemented");
  }

  // Attention over an INT8 cache; same contract as Attention plus own [n, kAttnOwnFields]
  // I32 (AttnOwnBlock records, attn_rows.h). A key read from int8 is codes * scale (F32),
  // then rotated; a value is codes * scale. Batch-invariant like Attention.
  virtual absl::Status AttentionInt8(Stream& stream, Tensor q, const KvCacheI8& cache, Tensor rows,
                                     Tensor own, Tensor block_tables, Tensor rope_table,
                                     const AttentionShape& shape, Tensor out) {
    return absl::UnimplementedError(Name() + ": INT8 KV attention not implemented");
  }

  // out = silu(gate) * up, elementwise. All [n, f] F32.
  virtual absl::Status SiluMul(Stream& stream, Tensor gate, Tensor up, Tensor out) = 0;
  // out = a + b, elementwise. All same shape F32; out may alias a or b.
  virtual absl::Status Add(Stream& stream, Tensor a, Tensor b, Tensor out) = 0;
};

struct CpuBackendOptions {
  // Worker threads for ops (including the caller). 0 = AvailableCpus() (common/cpus.h).
  int num_threads = 0;
  // true: the plain scalar reference kernels (the *Reference functions, kernels/cpu/cpu_ops.h).
  // false: the optimised kernels (threads, AVX2/FMA when the CPU has them).
  // Default: false.
  bool reference = false;
};

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options);

// Defined in kernels/cuda/cuda_backend.cc in CUDA builds (else cuda_unavailable.cc).
// Unavailable (with the CUDA error text) when there is no usable device `device`: no
// driver, no GPU, an index past the device count, or compute capability below 8.0 (the
// build targets sm_80 and sm_90).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

// "cpu" (optimised), "cpu-ref" (reference), "cuda" / "cuda:N" (when built with CUDA;
// Unavailable otherwise or without a usable device). InvalidArgument for unknown names.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name,
                                                       int num_threads);

}  // namespace kvfold::kernels

#endif  // KVFOLD_KERNELS_BACKEND_H_
