// Whole-file reads for small configuration inputs (PEM files, tokens and tenants files).
#ifndef KVFOLD_COMMON_FILE_UTIL_H_
#define KVFOLD_COMMON_FILE_UTIL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvfold {

// The file's bytes. NOT_FOUND "<what> not readable: <path>" when it cannot be opened,
// UNAVAILABLE when reading it fails part way.
absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             absl::string_view what = "file");

}  // namespace kvfold

#endif  // KVFOLD_COMMON_FILE_UTIL_H_
