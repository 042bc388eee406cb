// The version every kvfold binary reports (`--version`, docs/cli.md). Defined in a source
// generated at build time (cmake/KvfoldVersion.cmake).
#ifndef KVFOLD_COMMON_VERSION_H_
#define KVFOLD_COMMON_VERSION_H_

namespace kvfold {

// The CMake project version, e.g. "0.1.0".
extern const char kProjectVersion[];
// The full git commit the binary was built from, or "unknown" when it was not built from a
// git checkout (and no commit was given at configure time).
extern const char kGitCommit[];

}  // namespace kvfold

#endif  // KVFOLD_COMMON_VERSION_H_
