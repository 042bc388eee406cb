// FileWatcher: notices that a small configuration file changed (tokens and tenants files)
// and calls back, so a server picks the change up without a signal.
//
// The file's bytes are read every `period` and compared by XXH3 digest with the bytes last
// acted on: any change is seen, whether the file was rewritten in place (even twice within
// the filesystem's timestamp granularity), replaced by a rename, or swapped through a
// symlink as a Kubernetes Secret or ConfigMap volume does (the path is opened anew each
// time). New bytes count once two reads in a row agree, so a file caught half-written by
// an in-place writer (truncated, or empty) is not acted on: a change is seen within one
// to two periods. A file that cannot be read counts as a state of its own, so losing it
// and getting it back are both changes. The callback runs on the watcher's thread; it
// reloads and reports (a file that fails to parse keeps what is in force).
#ifndef KVFOLD_COMMON_FILE_WATCHER_H_
#define KVFOLD_COMMON_FILE_WATCHER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace kvfold {

class FileWatcher {
 public:
  // Starts watching; the file as it is now is the baseline (no call for it).
  FileWatcher(std::string path, absl::Duration period, std::function<void()> on_change);
  ~FileWatcher();  // stops the thread; no call runs after it returns
  FileWatcher(const FileWatcher&) = delete;
  FileWatcher& operator=(const FileWatcher&) = delete;

 private:
  // XXH3 of the file's bytes; nullopt when it cannot be read.
  std::optional<uint64_t> Digest() const;
  void Run();

  const std::string path_;
  const absl::Duration period_;
  const std::function<void()> on_change_;
  // Watcher thread only (after construction): the bytes last acted on, and those read at
  // the previous period.
  std::optional<uint64_t> seen_, pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace kvfold

#endif  // KVFOLD_COMMON_FILE_WATCHER_H_
