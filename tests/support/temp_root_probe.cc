// Run by temp_root_test.cc: writes a file under ::testing::TempDir(), says
// where on standard output, and fails when KWD_PROBE_FAIL is set.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <string>

TEST(Probe, WritesAFileUnderTempDir) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "written.txt") << "from the probe\n";
  std::printf("TEMPDIR=%s\n", dir.c_str());
  EXPECT_EQ(getenv("KWD_PROBE_FAIL"), nullptr) << "failing as asked";
}
