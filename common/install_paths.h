// Where an installed kvfold finds its data: `cmake --install` puts the binaries in
// <prefix>/bin and the data in <prefix>/share/kvfold (cmake/KvfoldInstall.cmake), so a binary
// finds the data relative to its own location, wherever the tree was installed or copied.
#ifndef KVFOLD_COMMON_INSTALL_PATHS_H_
#define KVFOLD_COMMON_INSTALL_PATHS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvfold {

// The value of --projector that asks for the installed projector made for the loaded model.
inline constexpr std::string_view kAutoProjector = "auto";

// <directory of the running binary>/../share/kvfold. NotFound when that is not a directory
// (a binary run from the build tree).
absl::StatusOr<std::string> InstalledDataDir();

// The installed projector directory (share/kvfold/projectors/<name>/) whose projector.json
// records `model_fingerprint`. NotFound, naming the directory searched, when none matches.
absl::StatusOr<std::string> FindInstalledProjector(std::string_view model_fingerprint);
// The same search below `data_dir` (tests).
absl::StatusOr<std::string> FindProjectorIn(const std::string& data_dir,
                                            std::string_view model_fingerprint);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_INSTALL_PATHS_H_
