// Counts the heap allocations of a test binary: a binary that links
// tests/testing/count_allocations.cc (one of its sources) replaces the global operator new
// and delete, and g_allocations counts every allocation.
#ifndef KVFOLD_TESTS_TESTING_COUNT_ALLOCATIONS_H_
#define KVFOLD_TESTS_TESTING_COUNT_ALLOCATIONS_H_

#include <atomic>
#include <cstdint>

extern std::atomic<int64_t> g_allocations;

#endif  // KVFOLD_TESTS_TESTING_COUNT_ALLOCATIONS_H_
