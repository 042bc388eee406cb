// Host memory of the CPU backend's buffers: weights copied for alignment, the Q8 panels
// laid out from them, the KV pool, activations.
#ifndef KVFOLD_KERNELS_CPU_HOST_MEMORY_H_
#define KVFOLD_KERNELS_CPU_HOST_MEMORY_H_

#include <cstddef>

namespace kvfold::kernels::cpu {

// Transparent huge pages: a buffer of at least this many bytes starts on a huge page.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` of uninitialised memory (nullptr when none is left, or for a size beyond any
// address space), released with std::free.
// 64-byte aligned; from kHugePageBytes up, aligned to kHugePageBytes and its whole huge
// pages advised for transparent huge pages (madvise MADV_HUGEPAGE; the partial last one
// keeps small pages; without THP in the kernel it is all plain memory). docs/engine.md "Host
// memory": a growing KV pool took a page fault per 4 KiB it reached (nine per token and session for
// the stories110m shape with an fp16 cache), and the weights' pages each a TLB entry.
void* AllocateHost(size_t bytes);

// Backs every page that [data, data + bytes) touches with memory now, writable, without
// changing its contents (madvise MADV_POPULATE_WRITE), so later first writes there take
// no page faults. Advice only: false when the kernel cannot (before Linux 5.14) or the
// range is not mapped; the memory then faults in on first use as before.
bool PopulateHost(void* data, size_t bytes);

}  // namespace kvfold::kernels::cpu

#endif  // KVFOLD_KERNELS_CPU_HOST_MEMORY_H_
