// The replaced global operator new and delete of tests/testing/count_allocations.h, in a
// file of their own (defined beside code that inlines allocators, GCC warns of a mismatch
// it only imagines). The nothrow form is replaced too, so that every pointer the replaced
// delete frees came from malloc (std::stable_sort's buffer is a nothrow new;
// AddressSanitizer reports the mismatch otherwise).
#include "tests/testing/count_allocations.h"

#include <cstdlib>
#include <new>

std::atomic<int64_t> g_allocations{0};

void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size ? size : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
