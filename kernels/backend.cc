#include "kernels/backend.h"

#include <cstdlib>
#include <string>

#include "kernels/check.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvfold::kernels {

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

absl::Status Backend::MatMuls(Stream& stream, Tensor x, const MatMulProduct* products,
                              int num_products) {
  for (int i = 0; i < num_products; ++i) {
    const MatMulProduct& p = products[i];
    if (absl::Status s = MatMul(stream, x, p.w, p.bias, p.out); !s.ok()) return s;
  }
  return absl::OkStatus();
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

}  // namespace kvfold::kernels
