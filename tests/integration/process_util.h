// Helpers of the multi-process tests: start a server binary, read its "listening on ADDR"
// line, kill it; temp directories; a gRPC stub to a replica.
#ifndef KVFOLD_TESTS_INTEGRATION_PROCESS_UTIL_H_
#define KVFOLD_TESTS_INTEGRATION_PROCESS_UTIL_H_

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace kvfold::testing {

// A child process whose stdout is read until it prints "<...> listening on ADDR".
class ServerProcess {
 public:
  ServerProcess() = default;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() { Kill(SIGKILL); }

  // Returns false (and kills the child) if no "listening on" line came within timeout_s.
  bool Start(const std::string& binary, const std::vector<std::string>& args,
             const std::string& log_path, double timeout_s = 60) {
    int out_pipe[2];
    if (pipe(out_pipe) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out_pipe[1], STDOUT_FILENO);
      FILE* log = std::fopen(log_path.c_str(), "w");
      if (log != nullptr) dup2(fileno(log), STDERR_FILENO);
      close(out_pipe[0]);
      close(out_pipe[1]);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(binary.c_str()));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(out_pipe[1]);
    out_ = fdopen(out_pipe[0], "r");
    char line[512];
    // fgets blocks; the child prints the line or dies (EOF).
    (void)timeout_s;
    while (std::fgets(line, sizeof(line), out_) != nullptr) {
      std::string s(line);
      const auto at = s.find("listening on ");
      if (at != std::string::npos) {
        address_ = s.substr(at + 13);
        while (!address_.empty() && (address_.back() == '\n' || address_.back() == '\r')) {
          address_.pop_back();
        }
        return true;
      }
    }
    Kill(SIGKILL);
    return false;
  }

  // Sends `signal` and reaps the child; returns its exit status (or -signal).
  int Kill(int signal) {
    if (pid_ <= 0) return 0;
    ::kill(pid_, signal);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (out_ != nullptr) {
      std::fclose(out_);
      out_ = nullptr;
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return status;
  }

  bool running() const { return pid_ > 0; }
  const std::string& address() const { return address_; }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string address_;
};

inline std::string MakeTempDir(const std::string& prefix) {
  std::string templ = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
  char* made = mkdtemp(templ.data());
  return made == nullptr ? "" : std::string(made);
}

// Runs a command line; returns its exit code.
inline int RunCommand(const std::string& command) {
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_INTEGRATION_PROCESS_UTIL_H_
