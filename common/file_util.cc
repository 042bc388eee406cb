#include "common/file_util.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvfold {

absl::StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, " not readable: ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::UnavailableError(absl::StrCat("error reading ", what, ": ", path));
  return ss.str();
}

}  // namespace kvfold
