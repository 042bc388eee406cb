// Helpers of the reliability suite: wait for a condition, read a process's resident memory,
// files, and test certificates made with the openssl CLI.
#ifndef KVFOLD_TESTS_RELIABILITY_RELIABILITY_UTIL_H_
#define KVFOLD_TESTS_RELIABILITY_RELIABILITY_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/process_util.h"

namespace kvfold::testing {

// Polls `condition` every 20 ms for up to timeout_s; returns its last value.
template <typename Condition>
bool WaitFor(Condition condition, double timeout_s = 10) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteWholeFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// VmRSS of `pid` in KiB (0 when unreadable).
inline int64_t RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

// Writes dir/{server,client}.{crt,key}: self-signed, the server's valid for 127.0.0.1 and
// localhost; the client's certificate is its own CA. False when openssl is missing.
inline bool MakeTestCertificates(const std::string& dir) {
  if (RunCommand("command -v openssl > /dev/null 2>&1") != 0) return false;
  for (const std::string name : {"server", "client"}) {
    const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + name +
                            " -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " + dir +
                            "/" + name + ".key -out " + dir + "/" + name + ".crt > /dev/null 2>&1";
    if (RunCommand(cmd) != 0) return false;
  }
  return true;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_RELIABILITY_RELIABILITY_UTIL_H_
