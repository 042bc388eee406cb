// Where the shared models live: $KVFOLD_SHARED_DIR, else <source>/../shared.
#ifndef KVFOLD_TESTS_INFERENCE_SVC_ENGINE_SHARED_DIR_H_
#define KVFOLD_TESTS_INFERENCE_SVC_ENGINE_SHARED_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kvfold::testing {

inline std::string SharedDir() {
  if (const char* d = std::getenv("KVFOLD_SHARED_DIR")) return d;
  const char* src = std::getenv("KVFOLD_SOURCE_DIR");
  return std::string(src ? src : ".") + "/../shared";
}

inline std::string Stories260K() { return SharedDir() + "/models/stories260K"; }

inline bool HaveStories260K() {
  return std::filesystem::exists(Stories260K() + "/stories260K.bin") &&
         std::filesystem::exists(Stories260K() + "/tok512.bin");
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INFERENCE_SVC_ENGINE_SHARED_DIR_H_
