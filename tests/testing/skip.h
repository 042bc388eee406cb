// The exit code by which a test binary or script tells CTest it skipped itself (automake's
// convention). kvfold_add_test and the script tests register it as SKIP_RETURN_CODE.
#ifndef KVFOLD_TESTS_TESTING_SKIP_H_
#define KVFOLD_TESTS_TESTING_SKIP_H_

namespace kvfold::testing {
inline constexpr int kSkipExitCode = 77;
}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_TESTING_SKIP_H_
