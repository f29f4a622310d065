// Linked into every gtest binary (kwd_add_test): the files a test process
// writes under ::testing::TempDir() go to a directory of its own, removed
// when every test of the process passed and kept (its path printed) when one
// failed. Without it, each ctest run left its snapshots, access logs, keys and
// certificates in /tmp, one directory per test case.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

namespace {

class TempRoot : public ::testing::Environment {
 public:
  void SetUp() override {
    // gtest reads TEST_TMPDIR on every TempDir() call; what the runner set
    // (or /tmp) is where this process's directory is made.
    std::string parent = ::testing::TempDir();
    old_.reset();
    if (const char* old = getenv("TEST_TMPDIR"); old != nullptr) {
      old_ = old;
    }
    std::string pattern = parent + "kwd-test.XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "kwd tests: cannot make a temp directory under %s; using it\n",
                   parent.c_str());
      return;
    }
    dir_ = pattern;
    setenv("TEST_TMPDIR", dir_.c_str(), 1);
  }

  void TearDown() override {
    if (dir_.empty()) {
      return;
    }
    if (old_) {
      setenv("TEST_TMPDIR", old_->c_str(), 1);
    } else {
      unsetenv("TEST_TMPDIR");
    }
    if (::testing::UnitTest::GetInstance()->Passed()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    } else {
      std::fprintf(stderr, "kwd tests: a test failed; its files are kept in %s\n", dir_.c_str());
    }
    dir_.clear();
  }

 private:
  std::string dir_;
  std::optional<std::string> old_;  // the runner's TEST_TMPDIR, if it set one
};

[[maybe_unused]] ::testing::Environment* const kTempRoot =
    ::testing::AddGlobalTestEnvironment(new TempRoot);

}  // namespace
