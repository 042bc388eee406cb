#include "kernels/backend.h"

#include <cstdlib>
#include <string>

#include "kernels/check.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvfold::kernels {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI8:
      return 1;
    case DType::kQ8:
      return 0;
  }
  return 0;
}

size_t StorageBytes(DType dtype, int64_t numel, int64_t last_dim) {
  if (dtype != DType::kQ8) return static_cast<size_t>(numel) * DTypeSize(dtype);
  if (last_dim <= 0) return 0;
  return static_cast<size_t>(numel / last_dim) * Q8RowBytes(last_dim);
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI8:
      return "i8";
    case DType::kQ8:
      return "q8";
  }
  return "?";
}

Tensor Tensor::Rows(int64_t row_begin, int64_t num_rows) const {
  KVFOLD_CHECK(row_begin >= 0 && row_begin + num_rows <= shape[0]);
  Tensor t = *this;
  const size_t row_bytes = shape[0] > 0 ? size_bytes() / shape[0] : 0;
  t.data = static_cast<char*>(data) + row_begin * row_bytes;
  t.shape[0] = num_rows;
  return t;
}

Tensor Tensor::Reshape(std::initializer_list<int64_t> new_shape) const {
  Tensor t = MakeTensor(data, dtype, new_shape);
  KVFOLD_CHECK(t.numel() == numel());
  return t;
}

std::string Tensor::DebugString() const {
  std::vector<int64_t> dims(shape.begin(), shape.begin() + rank);
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(dims, ","), "]");
}

Tensor MakeTensor(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  KVFOLD_CHECK(shape.size() <= 4u);
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t d : shape) t.shape[i++] = d;
  return t;
}

Tensor ViewOf(const Buffer& buffer, size_t offset, DType dtype,
              std::initializer_list<int64_t> shape) {
  Tensor t = MakeTensor(static_cast<char*>(buffer.data()) + offset, dtype, shape);
  KVFOLD_CHECK(offset + t.size_bytes() <= buffer.size_bytes());
  return t;
}

#ifndef KVFOLD_HAVE_CUDA
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  return absl::UnavailableError("this kvfold build has no CUDA backend (KVFOLD_CUDA=OFF)");
}
#endif

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name,
                                                       int num_threads) {
  if (name == "cpu" || name == "cpu-ref") {
    CpuBackendOptions options;
    options.num_threads = num_threads;
    options.reference = name == "cpu-ref";
    return CreateCpuBackend(options);
  }
  if (name == "cuda") return CreateCudaBackend(0);
  if (name.rfind("cuda:", 0) == 0) {
    int device = 0;
    if (!absl::SimpleAtoi(name.substr(5), &device) || device < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad backend name '", name, "'"));
    }
    return CreateCudaBackend(device);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "' (expected cpu, cpu-ref, cuda[:N])"));
}

}  // namespace kvfold::kernels
