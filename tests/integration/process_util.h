// Helpers of the multi-process tests: start a server binary, read its "listening on ADDR"
// line, kill it; temp directories; a gRPC stub to a replica.
#ifndef KVFOLD_TESTS_INTEGRATION_PROCESS_UTIL_H_
#define KVFOLD_TESTS_INTEGRATION_PROCESS_UTIL_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace kvfold::testing {

// Forks and executes `binary args...` with its stdout on `stdout_fd` and its stderr on
// `stderr_fd` (-1: inherited). Returns the child's pid, -1 when fork failed.
inline pid_t SpawnProcess(const std::string& binary, const std::vector<std::string>& args,
                          int stdout_fd, int stderr_fd) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (stdout_fd >= 0) dup2(stdout_fd, STDOUT_FILENO);
  if (stderr_fd >= 0) dup2(stderr_fd, STDERR_FILENO);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(binary.c_str(), argv.data());
  _exit(127);
}

// A child process whose stdout is read until it prints "<...> listening on ADDR".
class ServerProcess {
 public:
  ServerProcess() = default;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() { Kill(SIGKILL); }

  // Returns false (and kills the child) if no "listening on" line came within timeout_s.
  // The child's stderr goes to log_path (empty: the test's own stderr).
  bool Start(const std::string& binary, const std::vector<std::string>& args,
             const std::string& log_path, double timeout_s = 60) {
    int out_pipe[2];
    if (pipe(out_pipe) != 0) return false;
    const int log_fd =
        log_path.empty() ? -1 : open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_ = SpawnProcess(binary, args, out_pipe[1], log_fd);
    if (log_fd >= 0) close(log_fd);
    close(out_pipe[1]);
    out_fd_ = out_pipe[0];
    const std::string marker = "listening on ";
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      const ssize_t n = read(out_fd_, buf, sizeof(buf));
      if (n <= 0) break;  // the child exited
      out.append(buf, static_cast<size_t>(n));
      const size_t at = out.find(marker);
      const size_t eol = at == std::string::npos ? at : out.find('\n', at);
      if (eol != std::string::npos) {
        output_ = out;
        address_ = out.substr(at + marker.size(), eol - at - marker.size());
        while (!address_.empty() && address_.back() == '\r') address_.pop_back();
        return true;
      }
    }
    Kill(SIGKILL);
    return false;
  }

  // Sends `signal` without waiting (e.g. SIGTERM, then watch the drain; Kill reaps).
  void Notify(int signal) {
    if (pid_ > 0) ::kill(pid_, signal);
  }

  // Sends `signal` and reaps the child; returns its raw wait status (0 if none runs).
  int Signal(int signal) {
    if (pid_ <= 0) return 0;
    ::kill(pid_, signal);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (out_fd_ >= 0) {
      close(out_fd_);
      out_fd_ = -1;
    }
    return status;
  }

  // Signal(), decoded: the exit status, or -signal when the child was killed.
  int Kill(int signal) {
    if (pid_ <= 0) return 0;
    const int status = Signal(signal);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return status;
  }

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  // Everything the child printed up to and including its "listening on" line.
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string address_;
  std::string output_;
};

inline std::string MakeTempDir(const std::string& prefix) {
  std::string templ = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
  char* made = mkdtemp(templ.data());
  return made == nullptr ? "" : std::string(made);
}

inline constexpr int kStillRunning = -1000;

// Runs `binary args...` to its exit with stdout and stderr to `log_path` ("" = discarded).
// Returns its exit code, -signal when a signal ended it, or kStillRunning when it still ran
// after timeout_s (it is then killed).
inline int RunToExit(const std::string& binary, const std::vector<std::string>& args,
                     const std::string& log_path = "", double timeout_s = 60) {
  const int log_fd =
      open(log_path.empty() ? "/dev/null" : log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t pid = SpawnProcess(binary, args, log_fd, log_fd);
  if (log_fd >= 0) close(log_fd);
  if (pid < 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return kStillRunning;
    }
    usleep(20000);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? -WTERMSIG(status) : status;
}

// Runs a command line; returns its exit code.
inline int RunCommand(const std::string& command) {
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INTEGRATION_PROCESS_UTIL_H_
