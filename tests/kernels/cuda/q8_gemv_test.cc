// Q8 weights on CUDA (q8_gemv.cuh) against the CPU: the raw GEMV against the dequantized
// weights (kernels/quant's DequantizeRowQ8) times x in double, odd shapes (partial last
// block, a row count that is not a multiple of the warp's 8 tokens), the residual beta;
// the embedding gather bit-exact; and the Backend's MatMul / Gather with Q8 weights
// against the CPU reference backend fed the dequantized F32 matrix. Label gpu: skips
// without a device; cuda_emu_test (label emu) runs it on the host.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/q8_gemv.cuh"
#include "kernels/quant/weight_q8.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace kvfold::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::ExpectClose;
using testing::ExpectOk;
using testing::RandomFloats;

struct Q8Matrix {
  std::vector<uint8_t> bytes;  // rows Q8 rows
  std::vector<float> deq;      // [rows, cols] dequantized
};

Q8Matrix MakeQ8(int64_t rows, int64_t cols, uint32_t seed) {
  const auto w = RandomFloats(static_cast<size_t>(rows * cols), seed, -0.2f, 0.2f);
  const size_t row_bytes = kernels::Q8RowBytes(cols);
  Q8Matrix q{std::vector<uint8_t>(rows * row_bytes), std::vector<float>(w.size())};
  for (int64_t r = 0; r < rows; ++r) {
    quant::QuantizeRowQ8(w.data() + r * cols, cols, q.bytes.data() + r * row_bytes);
    quant::DequantizeRowQ8(q.bytes.data() + r * row_bytes, cols, q.deq.data() + r * cols);
  }
  return q;
}

void CheckQ8Linear(int64_t n, int64_t k, int64_t m, float beta) {
  SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k << " m " << m << " beta " << beta);
  const Q8Matrix w = MakeQ8(m, k, 7);
  const auto x = RandomFloats(static_cast<size_t>(n * k), 8);
  const auto y0 = RandomFloats(static_cast<size_t>(n * m), 9);
  DeviceArray<float> d_x(x), d_y(y0);
  DeviceArray<uint8_t> d_w(w.bytes);
  ExpectOk(Q8Linear(d_x.get(), n, k, d_w.get(), m, beta, d_y.get(), nullptr));
  const auto y = d_y.ToHost();
  std::vector<double> ref(y.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double s = beta * double{y0[i * m + j]};
      for (int64_t t = 0; t < k; ++t) s += double{x[i * k + t]} * w.deq[j * k + t];
      ref[i * m + j] = s;
    }
  }
  ExpectClose(y, ref, 1e-4, 1e-4, "q8 linear");
}

TEST(CudaQ8, LinearMatchesDequantizedWeights) {
  KVFOLD_SKIP_WITHOUT_GPU();
  // Small column counts keep the host emulation (one thread per CUDA thread) quick.
  CheckQ8Linear(1, 769, 131, 0.0f);   // decode row, partial last block, a partial warp block
  CheckQ8Linear(13, 75, 67, 1.0f);    // residual folded in; 13 = 8 + 5 tokens
  // k a multiple of 256: the 16-byte-load kernel.
  CheckQ8Linear(37, 2048, 10, 0.0f);  // the stories110m down projection's k, 5 token groups
  CheckQ8Linear(1, 768, 67, 1.0f);    // decode row at stories110m's width, residual folded in
}

TEST(CudaQ8, EmbeddingGatherIsExactAndZeroesBadIds) {
  KVFOLD_SKIP_WITHOUT_GPU();
  const int64_t vocab = 101, width = 77;
  const Q8Matrix table = MakeQ8(vocab, width, 3);
  std::vector<int32_t> ids = {0, 100, 57, -1, 101, 57};
  DeviceArray<uint8_t> d_table(table.bytes);
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<float> d_out(ids.size() * width);
  ExpectOk(Q8EmbeddingGather(d_table.get(), vocab, width, d_ids.get(),
                             static_cast<int64_t>(ids.size()), d_out.get(), nullptr));
  const auto out = d_out.ToHost();
  std::vector<double> ref(out.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < width; ++c) {
      const bool ok = ids[i] >= 0 && ids[i] < vocab;
      ref[i * width + c] = ok ? table.deq[ids[i] * width + c] : 0.0;
    }
  }
  ExpectClose(out, ref, 0, 0, "q8 gather");
}

TEST(CudaQ8, LaunchersRejectBadArguments) {
  KVFOLD_SKIP_WITHOUT_GPU();
  DeviceArray<float> d(64);
  DeviceArray<uint8_t> w(68);
  EXPECT_FALSE(Q8Linear(d.get(), 1, 0, w.get(), 1, 0.0f, d.get(), nullptr).ok());
  EXPECT_FALSE(Q8Linear(nullptr, 1, 32, w.get(), 1, 0.0f, d.get(), nullptr).ok());
  EXPECT_FALSE(Q8EmbeddingGather(w.get(), 1, 0, nullptr, 1, d.get(), nullptr).ok());
}

// The Backend: MatMul (with bias) and Gather on Q8 weights equal the CPU reference backend
// on the dequantized F32 matrix (the CUDA backend keeps activations F32).
TEST(CudaQ8, BackendMatMulAndGatherMatchCpuOnDequantizedWeights) {
  KVFOLD_SKIP_WITHOUT_GPU();
  auto gpu = kernels::CreateBackend("cuda:0", 1);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = kernels::CreateBackend("cpu-ref", 1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE((*gpu)->SupportsQ8Weights());
  const int64_t n = 5, k = 200, m = 41;
  const Q8Matrix w = MakeQ8(m, k, 11);
  auto x = RandomFloats(static_cast<size_t>(n * k), 12);
  auto bias = RandomFloats(static_cast<size_t>(m), 13);
  auto gs = (*gpu)->CreateStream();
  auto cs = (*cpu)->CreateStream();
  auto upload = [&](const void* host, size_t bytes) {
    auto buf = (*gpu)->AdoptWeights(host, bytes, nullptr);
    EXPECT_TRUE(buf.ok()) << buf.status();
    return std::move(*buf);
  };
  auto wq = upload(w.bytes.data(), w.bytes.size());
  auto xd = upload(x.data(), x.size() * 4);
  auto bd = upload(bias.data(), bias.size() * 4);
  auto od = (*gpu)->Allocate(static_cast<size_t>(n * m) * 4);
  ASSERT_TRUE(od.ok());
  using core::DType;
  using kernels::MakeTensor;
  ExpectOk((*gpu)->MatMul(*gs, MakeTensor(xd->data(), DType::kF32, {n, k}),
                          MakeTensor(wq->data(), DType::kQ8, {m, k}),
                          MakeTensor(bd->data(), DType::kF32, {m}),
                          MakeTensor((*od)->data(), DType::kF32, {n, m})));
  std::vector<float> got(static_cast<size_t>(n * m)), want(got.size());
  ExpectOk((*gpu)->CopyToHost(*gs, MakeTensor((*od)->data(), DType::kF32, {n, m}), got.data()));
  ExpectOk((*gpu)->Synchronize(*gs));
  std::vector<float> deq = w.deq;
  ExpectOk((*cpu)->MatMul(*cs, MakeTensor(x.data(), DType::kF32, {n, k}),
                          MakeTensor(deq.data(), DType::kF32, {m, k}),
                          MakeTensor(bias.data(), DType::kF32, {m}),
                          MakeTensor(want.data(), DType::kF32, {n, m})));
  ExpectClose(got, std::vector<double>(want.begin(), want.end()), 1e-4, 1e-4, "backend q8");

  std::vector<int32_t> ids = {40, 0, 17};
  auto idd = upload(ids.data(), ids.size() * 4);
  auto rows = (*gpu)->Allocate(ids.size() * k * 4);
  ASSERT_TRUE(rows.ok());
  // Gather treats the matrix as a table of m rows of k.
  ExpectOk((*gpu)->Gather(*gs, MakeTensor(wq->data(), DType::kQ8, {m, k}),
                          MakeTensor(idd->data(), DType::kI32, {3}),
                          MakeTensor((*rows)->data(), DType::kF32, {3, k})));
  std::vector<float> gathered(ids.size() * k);
  ExpectOk((*gpu)->CopyToHost(*gs, MakeTensor((*rows)->data(), DType::kF32, {3, k}),
                              gathered.data()));
  ExpectOk((*gpu)->Synchronize(*gs));
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(gathered.data() + i * k, w.deq.data() + ids[i] * k, k * 4)) << i;
  }
}

}  // namespace
}  // namespace kvfold::kernels::cuda
