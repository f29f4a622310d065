#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/support/command.h"

namespace kwd::testing {
namespace {

namespace fs = std::filesystem;

struct ProbeRun {
  CommandResult result;
  fs::path dir;  // the TempDir() the probe's test saw
};

ProbeRun RunProbe(const fs::path& parent, bool fail) {
  fs::create_directories(parent);
  ProbeRun run;
  run.result = RunCommand("TEST_TMPDIR=" + ShellQuote(parent.string() + "/") +
                              (fail ? " KWD_PROBE_FAIL=1 " : " ") +
                              ShellQuote(KWD_TEMP_ROOT_PROBE),
                          parent.parent_path() / (fail ? "out-fail" : "out-pass"));
  const size_t at = run.result.out.find("TEMPDIR=");
  if (at != std::string::npos) {
    const size_t end = run.result.out.find('\n', at);
    run.dir = run.result.out.substr(at + 8, end - at - 8);
  }
  return run;
}

TEST(TempRootTest, PassingProcessLeavesNothingBehind) {
  const fs::path parent = fs::path(::testing::TempDir()) / "pass-parent";
  ProbeRun run = RunProbe(parent, false);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.out << run.result.err;
  // The probe wrote into a directory of its own under the runner's
  // TEST_TMPDIR, not into TEST_TMPDIR itself.
  ASSERT_FALSE(run.dir.empty()) << run.result.out;
  EXPECT_EQ(run.dir.string().rfind(parent.string() + "/kwd-test.", 0), 0u) << run.dir;
  EXPECT_FALSE(fs::exists(run.dir)) << run.dir;
  EXPECT_TRUE(fs::is_empty(parent)) << parent;
}

TEST(TempRootTest, FailingProcessKeepsItsFilesAndSaysWhere) {
  const fs::path parent = fs::path(::testing::TempDir()) / "fail-parent";
  ProbeRun run = RunProbe(parent, true);
  ASSERT_EQ(run.result.exit_code, 1) << run.result.out << run.result.err;
  ASSERT_FALSE(run.dir.empty()) << run.result.out;
  EXPECT_EQ(ReadFileOrEmpty(run.dir / "written.txt"), "from the probe\n");
  std::string kept = run.dir.string();
  kept.pop_back();  // TempDir() ends with '/'; the message names the directory
  EXPECT_NE(run.result.err.find("its files are kept in " + kept), std::string::npos)
      << run.result.err;
}

}  // namespace
}  // namespace kwd::testing
