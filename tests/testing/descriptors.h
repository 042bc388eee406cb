// Loopback sockets, descriptor and thread limits for the tests of servers under connection
// floods and descriptor or thread shortage (HTTP API, metrics port).
#ifndef KVFOLD_TESTS_TESTING_DESCRIPTORS_H_
#define KVFOLD_TESTS_TESTING_DESCRIPTORS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvfold::testing {

// CPU seconds of this whole process so far (every thread).
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A TCP connection to 127.0.0.1:port; -1 when it fails (the descriptor is then closed).
inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Up to `n` connections to the port that never send a byte (a stalled client, a port
// scan); fewer when the process runs out of descriptors first. The caller closes them.
inline std::vector<int> SilentConnections(int port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = ConnectLoopback(port);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  return fds;
}

// While alive, the process may open only `spare` more descriptors than it holds now (the
// soft RLIMIT_NOFILE lowered); the destructor puts the limit back.
class ScopedDescriptorLimit {
 public:
  explicit ScopedDescriptorLimit(int spare) {
    ok_ = getrlimit(RLIMIT_NOFILE, &old_) == 0;
    int open_fds = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)entry;
      ++open_fds;
    }
    rlimit low = old_;
    low.rlim_cur = static_cast<rlim_t>(open_fds + spare);
    ok_ = ok_ && setrlimit(RLIMIT_NOFILE, &low) == 0;
  }
  ~ScopedDescriptorLimit() { setrlimit(RLIMIT_NOFILE, &old_); }
  ScopedDescriptorLimit(const ScopedDescriptorLimit&) = delete;
  ScopedDescriptorLimit& operator=(const ScopedDescriptorLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  bool ok_ = false;
};

// While Freeze() holds, the process cannot start another thread (pthread_create fails with
// EAGAIN, as in a container at its pid limit): the process is moved into a pids cgroup of
// its own (cgroup v1's pids hierarchy, which needs root) whose limit Freeze() sets to the
// threads it has. ok() is false where that hierarchy cannot be written; the destructor
// moves the process back and removes the group.
class ScopedThreadLimit {
 public:
  ScopedThreadLimit() {
    const std::filesystem::path root = "/sys/fs/cgroup/pids";
    std::error_code ec;
    dir_ = root / ("kvfold-test-" + std::to_string(::getpid()));
    if (!std::filesystem::exists(root / "cgroup.procs", ec) ||
        !std::filesystem::create_directory(dir_, ec)) {
      dir_.clear();
      return;
    }
    ok_ = Write(dir_ / "cgroup.procs", std::to_string(::getpid()));
  }
  ~ScopedThreadLimit() {
    if (dir_.empty()) return;
    Write(dir_ / "pids.max", "max");
    Write(dir_.parent_path() / "cgroup.procs", std::to_string(::getpid()));
    std::error_code ec;
    std::filesystem::remove(dir_, ec);
  }
  ScopedThreadLimit(const ScopedThreadLimit&) = delete;
  ScopedThreadLimit& operator=(const ScopedThreadLimit&) = delete;
  bool ok() const { return ok_; }
  // No new thread from now on.
  bool Freeze() {
    std::ifstream current(dir_ / "pids.current");
    std::string count;
    return ok_ && std::getline(current, count) && Write(dir_ / "pids.max", count);
  }
  // New threads again.
  bool Thaw() { return ok_ && Write(dir_ / "pids.max", "max"); }

 private:
  static bool Write(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    out.flush();
    return static_cast<bool>(out);
  }
  std::filesystem::path dir_;
  bool ok_ = false;
};

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_TESTING_DESCRIPTORS_H_
