#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "dataplane/cli/proxy_cli.h"
#include "tests/support/temp_path.h"

namespace kwd::cli {
namespace {

TEST(AffinityKeyTest, KeyFileIsTrimmedSoServeAndExplainSignAlike) {
  std::string path = testing::UniqueTempPath("affinity.key");
  std::ofstream(path) << "  s3cret-key\n";
  std::string key;
  std::string error;
  bool development = true;
  ASSERT_TRUE(LoadAffinityKey(path, &key, &development, &error)) << error;
  EXPECT_EQ(key, "s3cret-key");
  EXPECT_FALSE(development);
}

TEST(AffinityKeyTest, EmptyOrMissingFileIsAnError) {
  std::string path = testing::UniqueTempPath("empty.key");
  std::ofstream(path) << " \n";
  std::string key;
  std::string error;
  bool development = false;
  EXPECT_FALSE(LoadAffinityKey(path, &key, &development, &error));
  EXPECT_NE(error.find("is empty"), std::string::npos) << error;
  EXPECT_FALSE(LoadAffinityKey(path + ".missing", &key, &development, &error));
  EXPECT_NE(error.find("cannot read affinity key file"), std::string::npos) << error;
}

TEST(AffinityKeyTest, EnvironmentThenDevelopmentKey) {
  std::string key;
  std::string error;
  bool development = false;
  setenv("KWD_AFFINITY_KEY", "from-env", 1);
  ASSERT_TRUE(LoadAffinityKey("", &key, &development, &error));
  EXPECT_EQ(key, "from-env");
  EXPECT_FALSE(development);
  unsetenv("KWD_AFFINITY_KEY");
  ASSERT_TRUE(LoadAffinityKey("", &key, &development, &error));
  EXPECT_EQ(key, kDevelopmentAffinityKey);
  EXPECT_TRUE(development);
}

}  // namespace
}  // namespace kwd::cli
