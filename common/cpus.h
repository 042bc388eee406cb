// How many CPUs this process may use: its scheduler affinity, capped by the CPU quota of
// its cgroup (a container's `resources.limits.cpu`). std::thread::hardware_concurrency()
// reports the node's cores, which oversubscribes a container that may use only a few.
#ifndef KVFOLD_COMMON_CPUS_H_
#define KVFOLD_COMMON_CPUS_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace kvfold {

// min(CPUs in the affinity mask, ceil(cgroup quota)); at least 1.
int AvailableCpus();

// The CPU quota (in CPUs, e.g. 1.5) of the cgroup described by `proc_self_cgroup` (the
// text of /proc/self/cgroup) under `cgroup_root` (normally /sys/fs/cgroup): cgroup v2
// `cpu.max` ("<quota> <period>" or "max <period>") or v1 `cpu.cfs_quota_us` /
// `cpu.cfs_period_us` (-1 = none), of the process's cgroup and every ancestor; the
// smallest limit wins. std::nullopt when no limit is set or nothing is readable.
std::optional<double> CgroupCpuLimit(absl::string_view proc_self_cgroup,
                                     const std::string& cgroup_root);

}  // namespace kvfold

#endif  // KVFOLD_COMMON_CPUS_H_
