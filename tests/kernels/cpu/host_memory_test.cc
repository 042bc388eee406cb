// Host memory of the CPU backend: alignment, and large buffers advised for transparent
// huge pages (read back from the kernel's own account of the mapping, /proc/self/smaps).
#include "kernels/cpu/host_memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace kvfold::kernels::cpu {
namespace {

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using Host = std::unique_ptr<uint8_t, Free>;

Host Allocate(size_t bytes) { return Host(static_cast<uint8_t*>(AllocateHost(bytes))); }

// The THP mode in force ("always", "madvise", "never"), or "" without THP.
std::string ThpMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

// The THPeligible field of the mapping that holds p (-1: not found).
int ThpEligible(const void* p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

TEST(HostMemoryTest, SmallBuffersAreLineAligned) {
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{64}, size_t{100000}, kHugePageBytes - 1}) {
    Host h = Allocate(bytes);
    ASSERT_NE(h, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(h.get()) % 64, 0u) << bytes;
    std::memset(h.get(), 0x5a, bytes);
    EXPECT_EQ(h.get()[bytes - 1], 0x5a);
  }
}

TEST(HostMemoryTest, LargeBuffersStartOnAHugePageAdvisedForThp) {
  const size_t bytes = 3 * kHugePageBytes + 4096 + 7;
  Host h = Allocate(bytes);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h.get()) % kHugePageBytes, 0u);
  std::memset(h.get(), 0x33, bytes);
  EXPECT_EQ(h.get()[bytes - 1], 0x33);
  const std::string mode = ThpMode();
  if (mode != "always" && mode != "madvise") {
    GTEST_SKIP() << "transparent huge pages are off here (" << mode << ")";
  }
  // madvise mode: only advised mappings may take huge pages; always: every mapping.
  EXPECT_EQ(ThpEligible(h.get()), 1);
  EXPECT_EQ(ThpEligible(h.get() + 3 * kHugePageBytes - 1), 1);
  if (mode == "madvise") {
    // The partly used last huge page is not advised: it keeps small pages.
    EXPECT_EQ(ThpEligible(h.get() + 3 * kHugePageBytes), 0);
    EXPECT_EQ(ThpEligible(h.get() + bytes - 1), 0);
    // A plain malloc'ed mapping of the same size, for contrast.
    std::unique_ptr<uint8_t[]> plain(new uint8_t[bytes]);
    EXPECT_EQ(ThpEligible(plain.get()), 0);
  }
}

// Sizes no address space holds are refused, not rounded around to a small buffer.
TEST(HostMemoryTest, ImpossibleSizesAreRefused) {
  const size_t max = std::numeric_limits<size_t>::max();
  for (size_t bytes : {max, max - 1, max - kHugePageBytes + 2, max / 2 + 1}) {
    EXPECT_EQ(AllocateHost(bytes), nullptr) << bytes;
  }
  std::unique_ptr<Backend> be = CreateCpuBackend({1, false});
  for (size_t bytes : {max, max - 30}) {
    auto buf = be->Allocate(bytes);
    ASSERT_FALSE(buf.ok()) << bytes;
    EXPECT_EQ(buf.status().code(), absl::StatusCode::kResourceExhausted);
  }
  // Large but possible: refused by the system or granted, never a wrapped size.
  auto big = be->Allocate(size_t{1} << 46);
  if (big.ok()) {
    EXPECT_EQ((*big)->size_bytes(), size_t{1} << 46);
  } else {
    EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  }
}

// The backend's buffers (the KV pool among them) come from AllocateHost.
TEST(HostMemoryTest, BackendBuffersOfHugePageSizeStartOnOne) {
  std::unique_ptr<Backend> be = CreateCpuBackend({1, false});
  auto buf = be->Allocate(5 * kHugePageBytes);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*buf)->data()) % kHugePageBytes, 0u);
  auto small = be->Allocate(1000);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*small)->data()) % 64, 0u);
}

}  // namespace
}  // namespace kvfold::kernels::cpu
