#include "inference_svc/memory/safetensors_lite.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/fp16.h"
#include "nlohmann/json.hpp"

namespace kvfold::memory {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

int DtypeBytes(std::string_view dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

uint64_t ReadLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

absl::StatusOr<Fp32TensorMap> ParseSafetensors(std::string_view bytes) {
  if (bytes.size() < 8) return absl::InvalidArgumentError("safetensors: file shorter than 8 bytes");
  const uint64_t header_len = ReadLe64(bytes.data());
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: header length ", header_len, " exceeds the file"));
  }
  const std::string_view header_text = bytes.substr(8, header_len);
  const std::string_view data = bytes.substr(8 + header_len);
  nlohmann::json header = nlohmann::json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError("safetensors: header is not a JSON object");
  }
  Fp32TensorMap out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    if (!info.is_object() || !info.contains("dtype") || !info["dtype"].is_string() ||
        !info.contains("shape") || !info["shape"].is_array() ||
        !info.contains("data_offsets") || !info["data_offsets"].is_array() ||
        info["data_offsets"].size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: bad entry for '", name, "'"));
    }
    const std::string dtype = info["dtype"].get<std::string>();
    const int elem_bytes = DtypeBytes(dtype);
    if (elem_bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", name, "' has unsupported dtype ", dtype));
    }
    Fp32Tensor t;
    uint64_t count = 1;
    for (const auto& dim : info["shape"]) {
      if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (1ull << 40)) {
        return absl::InvalidArgumentError(absl::StrCat("safetensors: bad shape for '", name, "'"));
      }
      t.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
      count *= dim.get<uint64_t>();
      if (count > (1ull << 40)) {
        return absl::InvalidArgumentError(absl::StrCat("safetensors: '", name, "' is too large"));
      }
    }
    const auto& offs = info["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: bad offsets for '", name, "'"));
    }
    const uint64_t begin = offs[0].get<uint64_t>();
    const uint64_t end = offs[1].get<uint64_t>();
    if (begin > end || end > data.size() || end - begin != count * elem_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: offsets [", begin, ", ", end, ") of '", name,
          "' do not match its shape/dtype or exceed the data section (", data.size(), " B)"));
    }
    ranges.emplace_back(begin, end);
    t.data.resize(count);
    const char* src = data.data() + begin;
    for (uint64_t i = 0; i < count; ++i) {
      if (elem_bytes == 4) {
        std::memcpy(&t.data[i], src + 4 * i, 4);  // little-endian host assumed (x86/arm64)
      } else {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        t.data[i] = dtype == "F16" ? Fp16ToFp32(h) : Bf16ToFp32(h);
      }
    }
    out.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return absl::InvalidArgumentError("safetensors: tensor data ranges overlap");
    }
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
