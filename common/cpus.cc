#include "common/cpus.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvfold {
namespace {

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "150000 100000" -> 1.5; "max 100000" or anything unreadable -> nullopt.
std::optional<double> V2Limit(const std::string& dir) {
  std::optional<std::string> text = ReadSmallFile(dir + "/cpu.max");
  if (!text) return std::nullopt;
  std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(*text), ' ', absl::SkipEmpty());
  int64_t quota = 0, period = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &quota) ||
      !absl::SimpleAtoi(parts[1], &period) || quota <= 0 || period <= 0) {
    return std::nullopt;
  }
  return static_cast<double>(quota) / static_cast<double>(period);
}

std::optional<double> V1Limit(const std::string& dir) {
  std::optional<std::string> quota_text = ReadSmallFile(dir + "/cpu.cfs_quota_us");
  std::optional<std::string> period_text = ReadSmallFile(dir + "/cpu.cfs_period_us");
  int64_t quota = 0, period = 0;
  if (!quota_text || !period_text ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(*quota_text), &quota) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(*period_text), &period) || quota <= 0 ||
      period <= 0) {
    return std::nullopt;
  }
  return static_cast<double>(quota) / static_cast<double>(period);
}

// The smallest limit of `base + path` and its ancestors up to `base`.
std::optional<double> SmallestOnPath(const std::string& base, std::string path,
                                     std::optional<double> (*limit)(const std::string&)) {
  std::optional<double> best;
  while (true) {
    std::optional<double> here = limit(base + path);
    if (here && (!best || *here < *best)) best = here;
    if (path.empty() || path == "/") break;
    const size_t slash = path.find_last_of('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

std::optional<double> CgroupCpuLimit(absl::string_view proc_self_cgroup,
                                     const std::string& cgroup_root) {
  std::optional<double> best;
  auto take = [&best](std::optional<double> limit) {
    if (limit && (!best || *limit < *best)) best = limit;
  };
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    // "<id>:<controllers>:<path>"; v2 is "0::<path>".
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    const std::string path(f[2]);
    if (f[0] == "0" && f[1].empty()) {
      take(SmallestOnPath(cgroup_root, path, V2Limit));
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(f[1], ',')) {
      if (controller != "cpu") continue;
      for (const char* mount : {"/cpu,cpuacct", "/cpuacct,cpu", "/cpu"}) {
        take(SmallestOnPath(cgroup_root + mount, path, V1Limit));
      }
    }
  }
  // Inside a cgroup namespace the process's own cgroup is the root itself.
  take(V2Limit(cgroup_root));
  return best;
}

int AvailableCpus() {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  if (std::optional<std::string> self = ReadSmallFile("/proc/self/cgroup")) {
    if (std::optional<double> limit = CgroupCpuLimit(*self, "/sys/fs/cgroup")) {
      cpus = std::min(cpus, std::max(1, static_cast<int>(std::ceil(*limit))));
    }
  }
  return cpus;
}

}  // namespace kvfold
