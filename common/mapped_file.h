// A file mapped read-only into memory (mmap): the bytes stay valid while any copy of the
// keepalive lives. Model weights are read this way, so a large file costs page cache, not
// heap.
#ifndef KVFOLD_COMMON_MAPPED_FILE_H_
#define KVFOLD_COMMON_MAPPED_FILE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvfold {

struct MappedFile {
  std::string_view bytes;
  std::shared_ptr<const void> keepalive;  // unmaps when the last copy goes
};

// NotFound when `path` cannot be opened; Internal when it cannot be mapped.
absl::StatusOr<MappedFile> MapReadOnly(const std::string& path);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_MAPPED_FILE_H_
