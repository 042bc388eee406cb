// The GGUF container (llama.cpp's model files, versions 2 and 3), read without ggml:
// a little-endian header ("GGUF", version, tensor count, metadata count), typed metadata
// key/value pairs, tensor infos (name, dimensions fastest first, ggml type, offset), then
// the tensor data, aligned to `general.alignment` (default 32). Every count, length and
// offset is checked against the bytes before it is used: malformed input is
// InvalidArgument naming what and where, never a crash (docs/model-format.md, "GGUF").
#ifndef KVFOLD_COMMON_GGUF_H_
#define KVFOLD_COMMON_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mapped_file.h"

namespace kvfold::gguf {

// Metadata value types (gguf_type).
enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One metadata value. Numbers (and bools) are held as both integer and double; arrays of
// numbers or strings keep their elements, arrays of arrays only their length.
struct Value {
  ValueType type = ValueType::kU8;
  int64_t integer = 0;
  double number = 0;
  std::string string;
  ValueType element_type = ValueType::kU8;  // kArray
  uint64_t length = 0;                      // kArray
  std::vector<double> numbers;              // kArray of numbers or bools
  std::vector<std::string> strings;         // kArray of strings

  bool is_integer() const;
  bool is_number() const;  // integers, floats
};

// The ggml tensor types kvfold reads (ggml_type numbers); others keep their number and are
// refused by name. The block-quantized ones are decoded by kernels/quant/ggml_blocks.h.
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
};
// "F32", "Q4_K", ... for the error messages ("type 42" for unknown numbers).
std::string TensorTypeName(uint32_t type);

// A type's storage unit: `elements` consecutive elements of a row in `bytes` bytes (1 and
// the element size for F32/F16/BF16; 32 or 256 for the block-quantized types).
struct BlockLayout {
  uint32_t elements = 1;
  uint32_t bytes = 4;
};
// nullopt for types kvfold does not read.
std::optional<BlockLayout> BlockOf(uint32_t type);
// Bytes of `elements` consecutive elements of `type` (a multiple of its block's);
// nullopt for types kvfold does not read.
std::optional<uint64_t> TensorBytes(uint32_t type, uint64_t elements);

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ne[0] (the fastest, a row's length) first
  uint32_t type = 0;
  uint64_t offset = 0;    // from the start of the data section
  uint64_t bytes = 0;     // 0 for types kvfold does not read
  std::string_view data;  // into the parsed bytes; empty for unread types
};

struct File {
  uint32_t version = 0;
  std::map<std::string, Value> metadata;
  std::vector<TensorInfo> tensors;  // in file order
  uint64_t alignment = 32;

  const Value* Find(const std::string& key) const;
  const TensorInfo* Tensor(const std::string& name) const;
};

// True when `bytes` start with the GGUF magic.
bool HasMagic(std::string_view bytes);
// True when the file at `path` starts with it (false when it cannot be read).
bool IsGgufFile(const std::string& path);

// Parses `bytes` (which the caller keeps alive; tensors' data point into them). `what`
// names the file in messages. Checks: magic, version 2 or 3, counts that fit the bytes,
// strings and arrays inside the bytes, unique keys and tensor names, 1..4 positive
// dimensions whose product does not overflow, offsets aligned, a block-quantized tensor's
// rows a whole number of blocks, and every readable tensor's data inside the file and
// disjoint from the others.
absl::StatusOr<File> Parse(std::string_view bytes, std::string_view what);

// The file at `path` mapped (common/mapped_file.h) and parsed; `file`'s tensor data point
// into `mapping`. MapReadOnly's and Parse's errors.
struct Opened {
  MappedFile mapping;
  File file;
};
absl::StatusOr<Opened> Open(const std::string& path);

}  // namespace kvfold::gguf

#endif  // KVFOLD_COMMON_GGUF_H_
