// The main() of every kvfold GoogleTest binary. Same as gtest_main, except that a binary
// whose every selected test skipped itself (GTEST_SKIP: no GPU, no ../shared, no Ceph)
// exits with kSkipExitCode, which CTest reports as "Skipped" (SKIP_RETURN_CODE), so a run
// shows what did not execute instead of counting it as passed.
#include "gtest/gtest.h"
#include "tests/testing/skip.h"

#if defined(__SANITIZE_ADDRESS__)
// Tests of refused sizes ask for impossible allocations: under AddressSanitizer the
// allocator then returns null, as the release allocator does, instead of aborting.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  if (unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count())
    return kvfold::testing::kSkipExitCode;
  return 0;
}
