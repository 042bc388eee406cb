// Where the shared read-only material (real models, text) lives: $KVFOLD_SHARED_DIR, else
// <source>/../shared. A fresh clone has none: tests that need it skip and say what is missing.
#ifndef KVFOLD_TESTS_TESTING_SHARED_DIR_H_
#define KVFOLD_TESTS_TESTING_SHARED_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kvfold::testing {

inline std::string SharedDir() {
  if (const char* d = std::getenv("KVFOLD_SHARED_DIR")) return d;
  const char* src = std::getenv("KVFOLD_SOURCE_DIR");
  return std::string(src ? src : ".") + "/../shared";
}

// The path of `relative` under the shared directory, or "" when it does not exist.
inline std::string SharedFile(const std::string& relative) {
  const std::string path = SharedDir() + "/" + relative;
  return std::filesystem::exists(path) ? path : "";
}

// The message a test skips with when shared material is missing.
inline std::string MissingShared(const std::string& relative) {
  return "needs the shared material " + relative + " under " + SharedDir() +
         " (absent; set KVFOLD_SHARED_DIR)";
}

inline std::string Stories260K() { return SharedDir() + "/models/stories260K"; }

inline bool HaveStories260K() {
  return std::filesystem::exists(Stories260K() + "/stories260K.bin") &&
         std::filesystem::exists(Stories260K() + "/tok512.bin");
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_TESTING_SHARED_DIR_H_
