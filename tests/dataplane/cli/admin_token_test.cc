#include <gtest/gtest.h>

#include <fstream>

#include "dataplane/cli/proxy_cli.h"
#include "tests/support/temp_path.h"

namespace kwd::cli {
namespace {

TEST(AdminTokenTest, FileIsTrimmed) {
  std::string path = testing::UniqueTempPath("admin.token");
  std::ofstream(path) << "  t0ken-value\n";
  std::string token;
  std::string error;
  ASSERT_TRUE(LoadAdminToken(path, &token, &error)) << error;
  EXPECT_EQ(token, "t0ken-value");
}

TEST(AdminTokenTest, EmptyMissingOrUnprintableIsAnErrorNamingTheFlag) {
  std::string path = testing::UniqueTempPath("admin-empty.token");
  std::ofstream(path) << " \n";
  std::string token;
  std::string error;
  EXPECT_FALSE(LoadAdminToken(path, &token, &error));
  EXPECT_EQ(error, "--admin-token-file: " + path + " is empty");
  EXPECT_FALSE(LoadAdminToken(path + ".missing", &token, &error));
  EXPECT_EQ(error.rfind("--admin-token-file: cannot read", 0), 0u) << error;
  std::ofstream(path) << "two words\n";
  EXPECT_FALSE(LoadAdminToken(path, &token, &error));
  EXPECT_NE(error.find("visible ASCII"), std::string::npos) << error;
}

}  // namespace
}  // namespace kwd::cli
