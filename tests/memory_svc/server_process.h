// Runs the real kvfold-memory binary as a child process (for crash and shutdown tests).
#ifndef KVFOLD_TESTS_MEMORY_SVC_SERVER_PROCESS_H_
#define KVFOLD_TESTS_MEMORY_SVC_SERVER_PROCESS_H_

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <string>
#include <vector>

namespace kvfold::memory::testing {

class ServerProcess {
 public:
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
  }

  // Starts `binary args...` and waits (up to 30 s) for "kvfold-memory listening on ADDR".
  // Returns false when the process does not get there; address() is ADDR.
  bool Start(const std::string& binary, const std::vector<std::string>& args) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(binary.c_str()));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_fd_ = fds[0];
    const std::string marker = "kvfold-memory listening on ";
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      const ssize_t n = read(out_fd_, buf, sizeof(buf));
      if (n <= 0) return false;  // exited
      out.append(buf, static_cast<size_t>(n));
      const size_t at = out.find(marker);
      const size_t eol = at == std::string::npos ? at : out.find('\n', at);
      if (eol != std::string::npos) {
        address_ = out.substr(at + marker.size(), eol - at - marker.size());
        return true;
      }
    }
    return false;
  }

  // Sends `sig` and reaps the process; returns its wait status.
  int Stop(int sig) {
    int status = 0;
    kill(pid_, sig);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    close(out_fd_);
    out_fd_ = -1;
    return status;
  }

  const std::string& address() const { return address_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string address_;
};

// Runs `binary args...` to completion (output discarded); returns its exit code, or -1
// when it was killed by a signal.
inline int RunToExit(const std::string& binary, const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace kvfold::memory::testing

#endif  // KVFOLD_TESTS_MEMORY_SVC_SERVER_PROCESS_H_
