#include "common/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kwd {
namespace {

namespace fs = std::filesystem;

class FileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::path(testing::TempDir()) /
        ("kwd_file_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

TEST_F(FileTest, WriteFileAtomicallyReplacesTheFileAndLeavesNoTemporary) {
  const std::string path = (dir_ / "snapshot.json").string();
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, "first", &error)) << error;
  ASSERT_TRUE(WriteFileAtomically(path, std::string(1 << 20, 'x'), &error)) << error;
  std::string text;
  ASSERT_TRUE(ReadWholeFile(path, &text, &error)) << error;
  EXPECT_EQ(text, std::string(1 << 20, 'x'));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FileTest, WriteFileAtomicallyGivesTheModeAskedFor) {
  const std::string path = (dir_ / "cache.json").string();
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, "public", &error)) << error;
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  // Replacing a 0644 file with a 0600 one: the new file is owner-only.
  ASSERT_TRUE(WriteFileAtomically(path, "private key", &error, 0600)) << error;
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(FileTest, WriteFileAtomicallySaysWhyItFailsAndKeepsTheOldFile) {
  std::string error;
  EXPECT_FALSE(WriteFileAtomically((dir_ / "missing" / "f").string(), "x", &error));
  EXPECT_EQ(error.rfind("cannot write " + (dir_ / "missing" / "f").string() + ": open: ", 0), 0u)
      << error;
  // A directory where the file should be: the rename fails, nothing is left.
  fs::create_directories(dir_ / "taken" / "inside");
  EXPECT_FALSE(WriteFileAtomically((dir_ / "taken").string(), "x", &error));
  EXPECT_NE(error.find(": rename: "), std::string::npos) << error;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

// The temporary name is predictable: a symbolic link planted there must not
// have the content written to its target, nor end up as PATH.
TEST_F(FileTest, WriteFileAtomicallyNeverWritesThroughAPlantedLink) {
  const std::string path = (dir_ / "cache.json").string();
  const fs::path victim = dir_ / "victim.txt";
  { std::ofstream(victim) << "precious"; }
  fs::create_symlink(victim, path + ".tmp." + std::to_string(getpid()));
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(path, "snapshot", &error, 0600)) << error;
  std::string text;
  ASSERT_TRUE(ReadWholeFile(victim.string(), &text, &error)) << error;
  EXPECT_EQ(text, "precious");
  EXPECT_FALSE(fs::is_symlink(path));
  ASSERT_TRUE(ReadWholeFile(path, &text, &error)) << error;
  EXPECT_EQ(text, "snapshot");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace kwd
