#include "common/install_paths.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvfold {

namespace fs = std::filesystem;

absl::StatusOr<std::string> InstalledDataDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return absl::NotFoundError("cannot resolve the running binary (/proc/self/exe)");
  const fs::path data = exe.parent_path().parent_path() / "share" / "kvfold";
  if (!fs::is_directory(data, ec)) {
    return absl::NotFoundError(absl::StrCat("no installed data directory ", data.string(),
                                            " (is this binary installed?)"));
  }
  return data.string();
}

absl::StatusOr<std::string> FindProjectorIn(const std::string& data_dir,
                                            std::string_view model_fingerprint) {
  const fs::path root = fs::path(data_dir) / "projectors";
  std::error_code ec;
  std::vector<fs::path> candidates;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (fs::is_regular_file(entry.path() / "projector.json", ec))
      candidates.push_back(entry.path());
  }
  std::sort(candidates.begin(), candidates.end());  // a stable choice if two match
  for (const fs::path& dir : candidates) {
    std::ifstream in(dir / "projector.json");
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("model_fingerprint") && j["model_fingerprint"].is_string() &&
        j["model_fingerprint"].get<std::string>() == model_fingerprint) {
      return dir.string();
    }
  }
  return absl::NotFoundError(absl::StrCat("no projector under ", root.string(),
                                          " was made for model ", std::string(model_fingerprint)));
}

absl::StatusOr<std::string> FindInstalledProjector(std::string_view model_fingerprint) {
  absl::StatusOr<std::string> data = InstalledDataDir();
  if (!data.ok()) return data.status();
  return FindProjectorIn(*data, model_fingerprint);
}

}  // namespace kvfold
