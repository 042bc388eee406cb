// The main() of every kvfold GoogleTest binary. Same as gtest_main, except that a binary
// whose every selected test skipped itself (GTEST_SKIP: no GPU, no ../shared, no Ceph)
// exits with kSkipExitCode, which CTest reports as "Skipped" (SKIP_RETURN_CODE), so a run
// shows what did not execute instead of counting it as passed.
#include "gtest/gtest.h"
#include "tests/testing/skip.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) return rc;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  if (unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count())
    return kvfold::testing::kSkipExitCode;
  return 0;
}
