// A test fixture with a fresh temporary directory and a helper to write files into it.
#ifndef KVFOLD_TESTS_COMMON_TEMP_FILES_H_
#define KVFOLD_TESTS_COMMON_TEMP_FILES_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kvfold::testing {

class TempFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/kvfold-test-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Writes `text` to dir_/name (replacing it in place) and returns the path.
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::trunc) << text;
    return path;
  }
  std::string dir_;
};

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_COMMON_TEMP_FILES_H_
