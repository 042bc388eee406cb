#include "common/gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvfold::gguf {
namespace {

constexpr int kMaxDims = 4;  // GGML_MAX_DIMS
// Arrays inside arrays: deeper nesting than any writer uses is refused, so a crafted file
// cannot recurse without bound.
constexpr int kMaxArrayDepth = 4;

class Reader {
 public:
  Reader(std::string_view bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }

  absl::Status Bad(const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(what_, ": GGUF ", message, " (at byte ", pos_, ")"));
  }

  template <typename T>
  absl::StatusOr<T> Read(const char* field) {
    if (left() < sizeof(T)) return Bad(absl::StrCat("truncated in ", field));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> String(const char* field) {
    auto n = Read<uint64_t>(field);
    if (!n.ok()) return n.status();
    if (*n > left()) {
      return Bad(absl::StrCat(field, ": a string of ", *n, " bytes runs past the end"));
    }
    std::string s(bytes_.substr(pos_, *n));
    pos_ += *n;
    return s;
  }

  absl::Status Skip(uint64_t n, const char* field) {
    if (n > left()) return Bad(absl::StrCat(field, " runs past the end"));
    pos_ += n;
    return absl::OkStatus();
  }

 private:
  std::string_view bytes_;
  std::string what_;
  size_t pos_ = 0;
};

// Bytes of one scalar of `type`; 0 for strings, arrays and unknown types.
size_t ScalarBytes(ValueType type) {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    default:
      return 0;
  }
}

bool Known(uint32_t type) { return type <= static_cast<uint32_t>(ValueType::kF64); }

// A scalar of `type` at the reader: its integer and double.
absl::Status ReadScalar(Reader& r, ValueType type, int64_t* integer, double* number) {
  auto take = [&](auto v) -> absl::Status {
    if (!v.ok()) return v.status();
    *integer = static_cast<int64_t>(*v);
    *number = static_cast<double>(*v);
    return absl::OkStatus();
  };
  switch (type) {
    case ValueType::kU8:
    case ValueType::kBool:
      return take(r.Read<uint8_t>("a value"));
    case ValueType::kI8:
      return take(r.Read<int8_t>("a value"));
    case ValueType::kU16:
      return take(r.Read<uint16_t>("a value"));
    case ValueType::kI16:
      return take(r.Read<int16_t>("a value"));
    case ValueType::kU32:
      return take(r.Read<uint32_t>("a value"));
    case ValueType::kI32:
      return take(r.Read<int32_t>("a value"));
    case ValueType::kU64:
      return take(r.Read<uint64_t>("a value"));
    case ValueType::kI64:
      return take(r.Read<int64_t>("a value"));
    case ValueType::kF32:
    case ValueType::kF64: {
      double v = 0;
      if (type == ValueType::kF32) {
        auto f = r.Read<float>("a value");
        if (!f.ok()) return f.status();
        v = *f;
      } else {
        auto d = r.Read<double>("a value");
        if (!d.ok()) return d.status();
        v = *d;
      }
      *number = v;
      // Truncated toward zero where that fits (NaN and huge values are not integers).
      *integer = v > -9.2e18 && v < 9.2e18 ? static_cast<int64_t>(v) : 0;
      return absl::OkStatus();
    }
    default:
      return r.Bad("internal: not a scalar type");
  }
}

absl::Status ReadValue(Reader& r, ValueType type, int depth, Value* out);

absl::Status ReadArray(Reader& r, int depth, Value* out) {
  auto element = r.Read<uint32_t>("an array's type");
  if (!element.ok()) return element.status();
  if (!Known(*element)) return r.Bad(absl::StrCat("array of unknown value type ", *element));
  auto length = r.Read<uint64_t>("an array's length");
  if (!length.ok()) return length.status();
  out->element_type = static_cast<ValueType>(*element);
  out->length = *length;
  const size_t scalar = ScalarBytes(out->element_type);
  // Every element takes at least one byte (a string its 8-byte length): a count the rest
  // of the file cannot hold is refused before anything is reserved.
  const uint64_t least = scalar > 0 ? scalar : 8;
  if (*length > r.left() / least) {
    return r.Bad(absl::StrCat("an array of ", *length, " elements runs past the end"));
  }
  if (out->element_type == ValueType::kString) {
    out->strings.reserve(*length);
    for (uint64_t i = 0; i < *length; ++i) {
      auto s = r.String("an array's string");
      if (!s.ok()) return s.status();
      out->strings.push_back(*std::move(s));
    }
    return absl::OkStatus();
  }
  if (out->element_type == ValueType::kArray) {
    if (depth >= kMaxArrayDepth) {
      return r.Bad(absl::StrCat("arrays nested deeper than ", kMaxArrayDepth));
    }
    for (uint64_t i = 0; i < *length; ++i) {
      Value inner;
      if (absl::Status s = ReadArray(r, depth + 1, &inner); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  out->numbers.reserve(*length);
  for (uint64_t i = 0; i < *length; ++i) {
    int64_t integer = 0;
    double number = 0;
    if (absl::Status s = ReadScalar(r, out->element_type, &integer, &number); !s.ok()) return s;
    out->numbers.push_back(number);
  }
  return absl::OkStatus();
}

absl::Status ReadValue(Reader& r, ValueType type, int depth, Value* out) {
  out->type = type;
  if (type == ValueType::kString) {
    auto s = r.String("a string value");
    if (!s.ok()) return s.status();
    out->string = *std::move(s);
    return absl::OkStatus();
  }
  if (type == ValueType::kArray) return ReadArray(r, depth, out);
  return ReadScalar(r, type, &out->integer, &out->number);
}

}  // namespace

bool Value::is_integer() const {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kU16:
    case ValueType::kI16:
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kU64:
    case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool Value::is_number() const {
  return is_integer() || type == ValueType::kF32 || type == ValueType::kF64;
}

std::string TensorTypeName(uint32_t type) {
  // ggml_type numbers.
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return absl::StrCat("type ", type);
}

std::optional<BlockLayout> BlockOf(uint32_t type) {
  switch (static_cast<TensorType>(type)) {
    case TensorType::kF32:
      return BlockLayout{1, 4};
    case TensorType::kF16:
    case TensorType::kBF16:
      return BlockLayout{1, 2};
    // Blocks of 32: fp16 scale (and fp16 minimum for the _1 types), a fifth bit per element
    // for Q5, then the codes.
    case TensorType::kQ4_0:
      return BlockLayout{32, 2 + 16};
    case TensorType::kQ4_1:
      return BlockLayout{32, 2 + 2 + 16};
    case TensorType::kQ5_0:
      return BlockLayout{32, 2 + 4 + 16};
    case TensorType::kQ5_1:
      return BlockLayout{32, 2 + 2 + 4 + 16};
    case TensorType::kQ8_0:
      return BlockLayout{32, 2 + 32};
    // Super-blocks of 256 (ggml's K-quants).
    case TensorType::kQ2_K:
      return BlockLayout{256, 16 + 64 + 2 + 2};
    case TensorType::kQ3_K:
      return BlockLayout{256, 32 + 64 + 12 + 2};
    case TensorType::kQ4_K:
      return BlockLayout{256, 2 + 2 + 12 + 128};
    case TensorType::kQ5_K:
      return BlockLayout{256, 2 + 2 + 12 + 32 + 128};
    case TensorType::kQ6_K:
      return BlockLayout{256, 128 + 64 + 16 + 2};
    // 4-bit indices into a fixed non-linear table of 16 int8 levels: blocks of 32 under an
    // fp16 scale, or super-blocks of 256 with 6-bit sub-block scales.
    case TensorType::kIQ4_NL:
      return BlockLayout{32, 2 + 16};
    case TensorType::kIQ4_XS:
      return BlockLayout{256, 2 + 2 + 4 + 128};
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> TensorBytes(uint32_t type, uint64_t elements) {
  const std::optional<BlockLayout> block = BlockOf(type);
  if (!block.has_value()) return std::nullopt;
  return elements / block->elements * block->bytes;
}

const Value* File::Find(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const TensorInfo* File::Tensor(const std::string& name) const {
  for (const TensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool HasMagic(std::string_view bytes) { return bytes.substr(0, 4) == "GGUF"; }

bool IsGgufFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, sizeof(magic)) && HasMagic(std::string_view(magic, sizeof(magic)));
}

absl::StatusOr<Opened> Open(const std::string& path) {
  auto mapping = MapReadOnly(path);
  if (!mapping.ok()) return mapping.status();
  auto file = Parse(mapping->bytes, path);
  if (!file.ok()) return file.status();
  return Opened{.mapping = *std::move(mapping), .file = *std::move(file)};
}

absl::StatusOr<File> Parse(std::string_view bytes, std::string_view what_view) {
  const std::string what(what_view);
  Reader r(bytes, what);
  if (!HasMagic(bytes)) return r.Bad("magic missing: not a GGUF file");
  (void)r.Skip(4, "the magic");
  File file;
  auto version = r.Read<uint32_t>("the version");
  if (!version.ok()) return version.status();
  if (*version != 2 && *version != 3) {
    return absl::UnimplementedError(
        absl::StrCat(what, ": GGUF version ", *version, " (kvfold reads versions 2 and 3)"));
  }
  file.version = *version;
  auto n_tensors = r.Read<uint64_t>("the tensor count");
  if (!n_tensors.ok()) return n_tensors.status();
  auto n_kv = r.Read<uint64_t>("the metadata count");
  if (!n_kv.ok()) return n_kv.status();
  // A key/value pair takes at least 12 bytes (key length, type), a tensor info 24.
  if (*n_kv > r.left() / 12 || *n_tensors > r.left() / 24) {
    return r.Bad(
        absl::StrCat(*n_kv, " metadata pairs and ", *n_tensors, " tensors cannot fit in the file"));
  }
  for (uint64_t i = 0; i < *n_kv; ++i) {
    auto key = r.String("a metadata key");
    if (!key.ok()) return key.status();
    auto type = r.Read<uint32_t>("a metadata type");
    if (!type.ok()) return type.status();
    if (!Known(*type)) return r.Bad(absl::StrCat("key '", *key, "' has unknown type ", *type));
    Value value;
    if (absl::Status s = ReadValue(r, static_cast<ValueType>(*type), 0, &value); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s.message(), ", in key '", *key, "'"));
    }
    if (!file.metadata.emplace(*key, std::move(value)).second) {
      return r.Bad(absl::StrCat("key '", *key, "' appears twice"));
    }
  }
  if (const Value* a = file.Find("general.alignment"); a != nullptr) {
    if (!a->is_integer() || a->integer <= 0 || a->integer > (1 << 20) ||
        (a->integer & (a->integer - 1)) != 0) {
      return r.Bad("general.alignment must be a power of two up to 1 MiB");
    }
    file.alignment = static_cast<uint64_t>(a->integer);
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < *n_tensors; ++i) {
    TensorInfo t;
    auto name = r.String("a tensor name");
    if (!name.ok()) return name.status();
    t.name = *std::move(name);
    if (!names.insert(t.name).second)
      return r.Bad(absl::StrCat("tensor '", t.name, "' appears twice"));
    auto n_dims = r.Read<uint32_t>("a tensor's dimension count");
    if (!n_dims.ok()) return n_dims.status();
    if (*n_dims < 1 || *n_dims > kMaxDims) {
      return r.Bad(absl::StrCat("tensor '", t.name, "' has ", *n_dims, " dimensions (1..4)"));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto ne = r.Read<uint64_t>("a tensor dimension");
      if (!ne.ok()) return ne.status();
      if (*ne == 0 || *ne > (uint64_t{1} << 40) || elements > (uint64_t{1} << 48) / *ne) {
        return r.Bad(
            absl::StrCat("tensor '", t.name, "' has dimension ", *ne, " (empty or too large)"));
      }
      elements *= *ne;
      t.dims.push_back(static_cast<int64_t>(*ne));
    }
    auto type = r.Read<uint32_t>("a tensor type");
    if (!type.ok()) return type.status();
    t.type = *type;
    auto offset = r.Read<uint64_t>("a tensor offset");
    if (!offset.ok()) return offset.status();
    t.offset = *offset;
    if (t.offset % file.alignment != 0) {
      return r.Bad(absl::StrCat("tensor '", t.name, "' offset ", t.offset, " is not a multiple of ",
                                file.alignment));
    }
    const std::optional<BlockLayout> block = BlockOf(t.type);
    if (block.has_value() && t.dims[0] % block->elements != 0) {
      return r.Bad(absl::StrCat("tensor '", t.name, "' is ", TensorTypeName(t.type),
                                " with rows of ", t.dims[0], " elements (not a multiple of ",
                                block->elements, ")"));
    }
    t.bytes = TensorBytes(t.type, elements).value_or(0);
    file.tensors.push_back(std::move(t));
  }
  const uint64_t data_start = (r.pos() + file.alignment - 1) / file.alignment * file.alignment;
  if (data_start > bytes.size() && !file.tensors.empty()) {
    return r.Bad("the data section starts past the end of the file (truncated)");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (TensorInfo& t : file.tensors) {
    if (t.bytes == 0) continue;
    const uint64_t available = bytes.size() - data_start;
    if (t.offset > available || t.bytes > available - t.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": GGUF tensor '", t.name, "' (", t.bytes, " bytes at offset ",
                       t.offset, ") runs past the end of the file (truncated?)"));
    }
    t.data = bytes.substr(data_start + t.offset, t.bytes);
    ranges.emplace_back(t.offset, t.offset + t.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": GGUF tensor data ranges overlap"));
    }
  }
  return file;
}

}  // namespace kvfold::gguf
