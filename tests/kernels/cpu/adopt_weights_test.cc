// CPU backend weight adoption: 64-byte aligned host weights are aliased (zero copy),
// others are copied into aligned memory with the same bytes, on both CPU backends; a
// matmul over the copy gives the bits of one over the original.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace kvfold::kernels {
namespace {

constexpr uintptr_t kLine = 64;

// A 64-byte aligned array of `floats` floats plus `lead` bytes before them.
struct HostWeights {
  HostWeights(size_t floats, size_t lead) : storage(floats * sizeof(float) + lead + kLine) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + ((kLine - base % kLine) % kLine) + lead;
    for (size_t i = 0; i < floats; ++i) {
      const float v = static_cast<float>(static_cast<int>(i * 37 % 101) - 50) * 0.01f;
      std::memcpy(data + i * sizeof(float), &v, sizeof(v));
    }
  }
  std::vector<uint8_t> storage;
  uint8_t* data;
};

TEST(AdoptWeightsTest, AlignedIsAliasedOthersAreCopiedAligned) {
  constexpr int64_t m = 37, k = 48;
  const size_t bytes = m * k * sizeof(float);
  for (bool reference : {true, false}) {
    SCOPED_TRACE(reference ? "cpu-ref" : "cpu");
    std::unique_ptr<Backend> be = CreateCpuBackend({2, reference});
    HostWeights aligned(m * k, 0);
    auto same = be->AdoptWeights(aligned.data, bytes, nullptr);
    ASSERT_TRUE(same.ok()) << same.status();
    EXPECT_EQ((*same)->data(), aligned.data);
    for (size_t lead : {4, 28, 32}) {
      SCOPED_TRACE(lead);
      HostWeights odd(m * k, lead);
      auto keep = std::make_shared<int>(1);
      auto copy = be->AdoptWeights(odd.data, bytes, keep);
      ASSERT_TRUE(copy.ok()) << copy.status();
      EXPECT_NE((*copy)->data(), odd.data);
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*copy)->data()) % kLine, 0u);
      EXPECT_EQ((*copy)->size_bytes(), bytes);
      EXPECT_EQ(0, std::memcmp((*copy)->data(), odd.data, bytes));
      EXPECT_EQ(keep.use_count(), 1);  // the copy does not hold the host memory

      // The product over the copy equals the product over the aligned original.
      std::vector<float> x(3 * k), a(3 * m), b(3 * m);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
      auto s = be->CreateStream();
      ASSERT_TRUE(be->MatMul(*s, MakeTensor(x.data(), DType::kF32, {3, k}),
                             MakeTensor((*same)->data(), DType::kF32, {m, k}), Tensor(),
                             MakeTensor(a.data(), DType::kF32, {3, m})).ok());
      ASSERT_TRUE(be->MatMul(*s, MakeTensor(x.data(), DType::kF32, {3, k}),
                             MakeTensor((*copy)->data(), DType::kF32, {m, k}), Tensor(),
                             MakeTensor(b.data(), DType::kF32, {3, m})).ok());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace kvfold::kernels
