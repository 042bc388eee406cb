// The CPU identity the benchmarks record: cpuid decoded as Linux displays it.
#include "kernels/cpu/isa.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

namespace kvfold::kernels::cpu {
namespace {

// The first processor's "key : value" lines of /proc/cpuinfo (empty where there is none).
std::map<std::string, std::string> ProcCpuinfo() {
  std::map<std::string, std::string> fields;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && !line.empty()) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const size_t v = line.find_first_not_of(' ', colon + 1);
    fields[key] = v == std::string::npos ? "" : line.substr(v);
  }
  return fields;
}

TEST(CpuIdentity, MatchesWhatTheKernelReports) {
  const CpuIdentity& id = Cpu();
  ASSERT_EQ(id.vendor.size(), 12u) << id.vendor;
  EXPECT_GT(id.family, 0);
  const auto info = ProcCpuinfo();
  if (!info.count("vendor_id") || !info.count("cpu family") || !info.count("model")) {
    GTEST_SKIP() << "no x86 /proc/cpuinfo to compare with";
  }
  EXPECT_EQ(info.at("vendor_id"), id.vendor);
  EXPECT_EQ(info.at("cpu family"), std::to_string(id.family));
  EXPECT_EQ(info.at("model"), std::to_string(id.model));
  if (info.count("stepping") && info.at("stepping") != "unknown") {
    EXPECT_EQ(info.at("stepping"), std::to_string(id.stepping));
  }
  // The brand string is not compared: a hypervisor may hand the guest kernel a different
  // one at boot than cpuid gives a process later ("AMD EPYC" against "... Turin-like
  // Processor" on one VM).
}

}  // namespace
}  // namespace kvfold::kernels::cpu
