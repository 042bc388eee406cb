#include "inference_svc/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "nlohmann/json.hpp"

namespace kvfold::model {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

}  // namespace

absl::StatusOr<std::map<std::string, HostTensor>> ParseSafetensors(
    std::string_view bytes, std::shared_ptr<const void> keepalive, std::string_view what_view) {
  const std::string what(what_view);
  if (bytes.size() < 8) return Bad(what, "truncated safetensors file (no header length)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian hosts only
  // 100 MiB: the reference implementation's limit on the header.
  if (header_len > bytes.size() - 8 || header_len > (uint64_t{100} << 20)) {
    return Bad(what, absl::StrCat("header length ", header_len, " exceeds the file size ",
                                  bytes.size()));
  }
  json header = json::parse(bytes.substr(8, header_len), nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return Bad(what, "malformed safetensors header JSON");
  }
  const std::string_view data = bytes.substr(8 + header_len);
  std::map<std::string, HostTensor> tensors;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // data_offsets, to refuse overlaps
  try {
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
          !info.contains("data_offsets")) {
        return Bad(what, absl::StrCat("tensor '", name, "': missing dtype/shape/data_offsets"));
      }
      HostTensor t;
      const std::string dtype = info["dtype"].get<std::string>();
      if (dtype == "F32") {
        t.dtype = DType::kF32;
      } else if (dtype == "F16") {
        t.dtype = DType::kF16;
      } else if (dtype == "BF16") {
        t.dtype = DType::kBF16;
      } else if (dtype == "Q8") {  // kvfold's blocked int8 (docs/model-format.md)
        t.dtype = DType::kQ8;
      } else {
        return Bad(what, absl::StrCat("tensor '", name, "': unsupported dtype ", dtype));
      }
      uint64_t numel = 1;
      for (const auto& d : info["shape"]) {
        const int64_t v = d.get<int64_t>();
        if (v < 0 || v > (int64_t{1} << 40)) {
          return Bad(what, absl::StrCat("tensor '", name, "': bad dimension ", v));
        }
        t.shape.push_back(v);
        if (v != 0 && numel > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(v)) {
          return Bad(what, absl::StrCat("tensor '", name, "': shape overflows"));
        }
        numel *= static_cast<uint64_t>(v);
      }
      if (t.dtype == DType::kQ8 && t.shape.size() != 2) {
        return Bad(what, absl::StrCat("tensor '", name, "': Q8 tensors must have rank 2"));
      }
      const auto& offs = info["data_offsets"];
      if (!offs.is_array() || offs.size() != 2) {
        return Bad(what, absl::StrCat("tensor '", name, "': data_offsets must be [begin, end]"));
      }
      const uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
      if (begin > end || end > data.size()) {
        return Bad(what, absl::StrCat("tensor '", name, "': data_offsets [", begin, ", ", end,
                                      ") outside the data section (", data.size(),
                                      " bytes; file truncated?)"));
      }
      const int64_t last = t.shape.empty() ? 1 : t.shape.back();
      if (end - begin != core::StorageBytes(t.dtype, static_cast<int64_t>(numel), last)) {
        return Bad(what, absl::StrCat("tensor '", name, "': ", end - begin,
                                      " bytes do not match its shape and dtype"));
      }
      ranges.emplace_back(begin, end);
      t.data = data.data() + begin;
      t.size_bytes = end - begin;
      t.keepalive = keepalive;
      tensors.emplace(name, std::move(t));
    }
  } catch (const json::exception& e) {
    return Bad(what, absl::StrCat("malformed safetensors header: ", e.what()));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return Bad(what, "tensor data ranges overlap");
  }
  return tensors;
}

absl::StatusOr<std::map<std::string, HostTensor>> LoadSafetensorsFile(const std::string& path) {
  auto mapped = MapReadOnly(path);
  if (!mapped.ok()) return mapped.status();
  return ParseSafetensors(mapped->bytes, mapped->keepalive, path);
}

std::string SerializeSafetensors(const std::map<std::string, HostTensor>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    json info;
    info["dtype"] = t.dtype == DType::kF32    ? "F32"
                    : t.dtype == DType::kF16  ? "F16"
                    : t.dtype == DType::kBF16 ? "BF16"
                                              : "Q8";
    info["shape"] = t.shape;
    info["data_offsets"] = {offset, offset + t.size_bytes};
    header[name] = info;
    offset += t.size_bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // keep the data 8-byte aligned
  std::string out;
  out.reserve(8 + h.size() + offset);
  const uint64_t len = h.size();
  out.append(reinterpret_cast<const char*>(&len), 8);
  out += h;
  for (const auto& [name, t] : tensors) out.append(static_cast<const char*>(t.data), t.size_bytes);
  return out;
}

}  // namespace kvfold::model
