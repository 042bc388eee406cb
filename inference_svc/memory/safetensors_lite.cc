#include "inference_svc/memory/safetensors_lite.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/fp16.h"
#include "inference_svc/model/safetensors.h"
#include "nlohmann/json.hpp"

namespace kvfold::memory {

absl::StatusOr<Fp32TensorMap> ParseSafetensors(std::string_view bytes) {
  absl::StatusOr<std::map<std::string, model::HostTensor>> tensors =
      model::ParseSafetensors(bytes, nullptr, "safetensors");
  if (!tensors.ok()) return tensors.status();
  Fp32TensorMap out;
  for (const auto& [name, t] : *tensors) {
    if (!core::IsFloatDType(t.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", name,
                                                     "' has unsupported dtype ",
                                                     core::DTypeName(t.dtype)));
    }
    Fp32Tensor f;
    f.shape = t.shape;
    const size_t count = t.size_bytes / core::DTypeSize(t.dtype);
    f.data.resize(count);
    for (size_t i = 0; i < count; ++i) {
      if (t.dtype == core::DType::kF32) {
        std::memcpy(&f.data[i], static_cast<const char*>(t.data) + 4 * i, 4);  // little-endian
      } else {
        uint16_t h;
        std::memcpy(&h, static_cast<const char*>(t.data) + 2 * i, 2);
        f.data[i] = t.dtype == core::DType::kF16 ? Fp16ToFp32(h) : Bf16ToFp32(h);
      }
    }
    out.emplace(name, std::move(f));
  }
  return out;
}

std::string SerializeSafetensorsF32(const Fp32TensorMap& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {  // std::map: sorted by name
    const uint64_t size = t.data.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string header_text = header.dump();
  while (header_text.size() % 8 != 0) header_text.push_back(' ');
  std::string out;
  out.reserve(8 + header_text.size() + offset);
  const uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += header_text;
  for (const auto& [name, t] : tensors) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  }
  return out;
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::UnavailableError(absl::StrCat("error reading ", path));
  return std::move(ss).str();
}

absl::Status WriteFileBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot create ", path));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace kvfold::memory
