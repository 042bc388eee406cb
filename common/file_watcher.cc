#include "common/file_watcher.h"

#include <utility>

#include "common/checksum.h"
#include "common/file_util.h"

namespace kvfold {

FileWatcher::FileWatcher(std::string path, absl::Duration period,
                         std::function<void()> on_change)
    : path_(std::move(path)), period_(period), on_change_(std::move(on_change)) {
  seen_ = pending_ = Digest();
  thread_ = std::thread([this] { Run(); });
}

FileWatcher::~FileWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::optional<uint64_t> FileWatcher::Digest() const {
  absl::StatusOr<std::string> bytes = ReadFileToString(path_);
  if (!bytes.ok()) return std::nullopt;
  return Xxh3(bytes->data(), bytes->size());
}

void FileWatcher::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, absl::ToChronoMilliseconds(period_), [this] { return stop_; })) {
    lock.unlock();
    const std::optional<uint64_t> now = Digest();
    if (now == seen_) {
      pending_ = now;
    } else if (now == pending_) {
      // The same new bytes twice in a row: not a writer's half-written file.
      seen_ = now;  // a file that fails to load is reported once, not every period
      on_change_();
    } else {
      pending_ = now;
    }
    lock.lock();
  }
}

}  // namespace kvfold
