#include "kernels/cpu/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <limits>

namespace kvfold::kernels::cpu {

void* AllocateHost(size_t bytes) {
  constexpr size_t kLine = 64;
  // No address space holds half of size_t's range; refusing it here also keeps the
  // roundings below from wrapping around to a small buffer.
  if (bytes > std::numeric_limits<size_t>::max() / 2) return nullptr;
  if (bytes < kHugePageBytes) {
    return std::aligned_alloc(kLine, (bytes + kLine - 1) / kLine * kLine);
  }
  // aligned_alloc wants a multiple of the alignment; past `bytes` nothing is touched.
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  // Only the huge pages that `bytes` fills are advised: a partly used last one would hold
  // up to 2 MiB of memory nothing uses (a 2.25 MiB matrix would take 4 MiB), so the tail
  // keeps small pages. Advice only: without THP the memory stays usable as is.
  if (p != nullptr) madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return p;
}

bool PopulateHost(void* data, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (bytes == 0) return true;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes + page - 1) / page * page;
  return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
#else
  return false;
#endif
}

}  // namespace kvfold::kernels::cpu
