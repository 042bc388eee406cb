#include "common/cpus.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kvfold {
namespace {

namespace fs = std::filesystem;

// A fake /sys/fs/cgroup tree in a temp directory.
class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kvfold_cpus_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& relative, const std::string& text) {
    const fs::path p = root_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
};

TEST_F(CgroupTree, V2QuotaOfTheProcessCgroup) {
  Write("kubepods/pod1/ctr/cpu.max", "150000 100000\n");
  EXPECT_DOUBLE_EQ(*CgroupCpuLimit("0::/kubepods/pod1/ctr\n", root()), 1.5);
}

TEST_F(CgroupTree, V2SmallestLimitOnThePathWins) {
  Write("kubepods/cpu.max", "max 100000\n");
  Write("kubepods/pod1/cpu.max", "200000 100000\n");
  Write("kubepods/pod1/ctr/cpu.max", "400000 100000\n");
  EXPECT_DOUBLE_EQ(*CgroupCpuLimit("0::/kubepods/pod1/ctr\n", root()), 2.0);
}

TEST_F(CgroupTree, V2NoLimit) {
  Write("user.slice/cpu.max", "max 100000\n");
  EXPECT_FALSE(CgroupCpuLimit("0::/user.slice\n", root()).has_value());
  EXPECT_FALSE(CgroupCpuLimit("", root()).has_value());
}

TEST_F(CgroupTree, V2CgroupNamespaceReadsTheRoot) {
  Write("cpu.max", "50000 100000\n");
  EXPECT_DOUBLE_EQ(*CgroupCpuLimit("0::/\n", root()), 0.5);
}

TEST_F(CgroupTree, V1CfsQuota) {
  Write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
  Write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_DOUBLE_EQ(
      *CgroupCpuLimit("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n", root()), 3.0);
  // -1 = unlimited.
  Write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  EXPECT_FALSE(CgroupCpuLimit("4:cpu,cpuacct:/docker/abc\n", root()).has_value());
}

TEST_F(CgroupTree, MalformedFilesAreIgnored) {
  Write("a/cpu.max", "lots\n");
  EXPECT_FALSE(CgroupCpuLimit("0::/a\n", root()).has_value());
  EXPECT_FALSE(CgroupCpuLimit("garbage without colons\n", root()).has_value());
}

TEST(AvailableCpus, AtLeastOneAndAtMostTheNode) {
  const int cpus = AvailableCpus();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, static_cast<int>(sysconf(_SC_NPROCESSORS_CONF)));
}

}  // namespace
}  // namespace kvfold
