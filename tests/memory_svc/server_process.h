// Runs the real kvfold-memory binary as a child process (for crash and shutdown tests).
#ifndef KVFOLD_TESTS_MEMORY_SVC_SERVER_PROCESS_H_
#define KVFOLD_TESTS_MEMORY_SVC_SERVER_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <string>
#include <vector>

#include "tests/integration/process_util.h"

namespace kvfold::memory_svc::testing {

// The shared child-process helper (tests/integration/process_util.h) with the crash
// tests' defaults: stderr to the test's own, 30 s to print "listening on", and Stop
// returning the raw wait status.
class ServerProcess : public kvfold::testing::ServerProcess {
 public:
  bool Start(const std::string& binary, const std::vector<std::string>& args) {
    return kvfold::testing::ServerProcess::Start(binary, args, /*log_path=*/"", 30);
  }
  int Stop(int sig) { return Signal(sig); }
};

// Runs `binary args...` to its exit (output discarded); returns its exit code.
using kvfold::testing::RunToExit;

}  // namespace kvfold::memory_svc::testing

#endif  // KVFOLD_TESTS_MEMORY_SVC_SERVER_PROCESS_H_
