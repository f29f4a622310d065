// ReadFromDir, the reader of `kwd-controller import --files DIR`: files
// inside the directory are read; a link out of it is refused, also when it
// replaces a file while the file is being looked up.

#include "controller/importer/files_dir.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace kwd::importer {
namespace {

namespace fs = std::filesystem;

class FilesDirTest : public testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(testing::TempDir()) /
            ("kwd_files_dir_" +
             std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    dir_ = root_ / "bundle";
    fs::create_directories(dir_);
    dir_ = fs::canonical(dir_);
    std::ofstream(root_ / "secret.txt") << "SECRET-TOKEN-abc123\n";
  }
  void TearDown() override { fs::remove_all(root_); }

  ReadStatus Read(const std::string& reference, std::string* text, std::string* error) {
    std::string shown;
    return ReadFromDir(dir_, reference, text, &shown, error);
  }

  fs::path root_;
  fs::path dir_;
};

TEST_F(FilesDirTest, ARegularFileInsideIsRead) {
  std::ofstream(dir_ / "rules.txt") << "SetHeader X-A v\n";
  fs::create_directories(dir_ / "sec");
  std::ofstream(dir_ / "sec" / "permtab.txt") << "P /*\n";
  std::string text;
  std::string error;
  EXPECT_EQ(Read("rules.txt", &text, &error), ReadStatus::kRead) << error;
  EXPECT_EQ(text, "SetHeader X-A v\n");
  // The path as written when relative, else the file name alone.
  EXPECT_EQ(Read("sec/permtab.txt", &text, &error), ReadStatus::kRead) << error;
  EXPECT_EQ(text, "P /*\n");
  EXPECT_EQ(Read("/usr/sap/W01/rules.txt", &text, &error), ReadStatus::kRead) << error;
  EXPECT_EQ(text, "SetHeader X-A v\n");
  // A relative link that stays inside is followed.
  fs::create_symlink("sec/permtab.txt", dir_ / "inside.txt");
  EXPECT_EQ(Read("inside.txt", &text, &error), ReadStatus::kRead) << error;
  EXPECT_EQ(text, "P /*\n");
  EXPECT_EQ(Read("missing.txt", &text, &error), ReadStatus::kUnreadable);
  EXPECT_NE(error.find("no such file in " + dir_.string()), std::string::npos) << error;
}

TEST_F(FilesDirTest, LinksOutOfTheDirectoryAreRefusedWithAClearError) {
  fs::create_symlink(root_ / "secret.txt", dir_ / "absolute.txt");
  fs::create_symlink("../secret.txt", dir_ / "relative.txt");
  fs::create_directories(dir_ / "sub");
  fs::create_symlink("../../secret.txt", dir_ / "sub" / "deep.txt");
  fs::create_symlink(root_, dir_ / "up");
  for (const char* name : {"absolute.txt", "relative.txt", "sub/deep.txt", "up/secret.txt"}) {
    std::string text;
    std::string error;
    EXPECT_EQ(Read(name, &text, &error), ReadStatus::kRefused) << name << ": " << error;
    EXPECT_EQ(text, "") << name;
    EXPECT_NE(error.find("outside " + dir_.string() + " (the --files directory); not read"),
              std::string::npos)
        << name << ": " << error;
  }
  // An absolute link is not followed even to a file inside: the kernel
  // resolves beneath the directory, where "/" leads out.
  std::ofstream(dir_ / "real.txt") << "SetHeader X-A v\n";
  fs::create_symlink(dir_ / "real.txt", dir_ / "absolute-inside.txt");
  std::string text;
  std::string error;
  EXPECT_EQ(Read("absolute-inside.txt", &text, &error), ReadStatus::kRefused) << error;
  EXPECT_NE(error.find("only relative links are followed inside " + dir_.string()),
            std::string::npos)
      << error;
}

TEST_F(FilesDirTest, LoopsDirectoriesAndFifosAreRefused) {
  fs::create_symlink("loop.txt", dir_ / "loop.txt");
  fs::create_symlink("pong.txt", dir_ / "ping.txt");
  fs::create_symlink("ping.txt", dir_ / "pong.txt");
  fs::create_directories(dir_ / "adir.txt");
  ASSERT_EQ(mkfifo((dir_ / "fifo.txt").c_str(), 0600), 0);
  for (const char* name : {"loop.txt", "ping.txt", "adir.txt", "fifo.txt"}) {
    std::string text;
    std::string error;
    // A FIFO with no writer would block an open for reading: it must not.
    EXPECT_EQ(Read(name, &text, &error), ReadStatus::kRefused) << name << ": " << error;
    EXPECT_NE(error.find("; not read"), std::string::npos) << name << ": " << error;
  }
}

// The file is swapped with a link out of the directory (renameat2
// RENAME_EXCHANGE, atomic) over and over while it is read: every read gets
// the file or is refused, never what the link points to.
TEST_F(FilesDirTest, AFileSwappedForALinkOutIsNeverReadThroughIt) {
  std::ofstream(dir_ / "rules.txt") << "SetHeader X-A v\n";
  fs::create_symlink(root_ / "secret.txt", dir_ / "swap.txt");
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const std::string a = (dir_ / "rules.txt").string();
    const std::string b = (dir_ / "swap.txt").string();
    while (!stop.load()) {
      syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
    }
  });
  int read = 0;
  int refused = 0;
  int leaked = 0;
  for (int i = 0; i < 20000 && leaked == 0; ++i) {
    std::string text;
    std::string error;
    ReadStatus status = Read("rules.txt", &text, &error);
    read += status == ReadStatus::kRead ? 1 : 0;
    refused += status == ReadStatus::kRefused ? 1 : 0;
    leaked += text.find("SECRET") != std::string::npos ? 1 : 0;
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(leaked, 0) << read << " read, " << refused << " refused";
  EXPECT_GT(read, 0);
  EXPECT_GT(refused, 0);
}

#if defined(__x86_64__)
constexpr unsigned kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr unsigned kAuditArch = 0;
#endif

// A kernel without openat2 (before 5.6: ENOSYS), or a container whose
// seccomp profile predates it (EPERM, as Docker's default did before 20.10),
// played by a seccomp filter that answers `refusal` to it in a child process:
// the reader falls back to resolving and checking each path, and still reads
// a file inside and refuses a link out.
class FilesDirWithoutOpenat2Test : public FilesDirTest, public testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(Refusals, FilesDirWithoutOpenat2Test, testing::Values(ENOSYS, EPERM),
                         [](const testing::TestParamInfo<int>& info) {
                           return std::string(info.param == ENOSYS ? "ENOSYS" : "EPERM");
                         });

TEST_P(FilesDirWithoutOpenat2Test, TheFallbackStillRefusesLinksOut) {
  if (kAuditArch == 0) {
    GTEST_SKIP() << "no seccomp architecture constant for this machine";
  }
  const unsigned refusal = static_cast<unsigned>(GetParam());
  std::ofstream(dir_ / "rules.txt") << "SetHeader X-A v\n";
  fs::create_symlink(root_ / "secret.txt", dir_ / "out.txt");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (refusal & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {static_cast<unsigned short>(std::size(filter)), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
      _exit(10);
    }
    if (syscall(SYS_openat2, AT_FDCWD, "/", nullptr, 0) != -1 || errno != GetParam()) {
      _exit(11);  // the filter does not hold
    }
    int failures = 0;
    std::string text;
    std::string error;
    failures |= Read("rules.txt", &text, &error) == ReadStatus::kRead ? 0 : 1;
    failures |= text == "SetHeader X-A v\n" ? 0 : 2;
    text.clear();
    failures |= Read("out.txt", &text, &error) == ReadStatus::kRefused ? 0 : 4;
    failures |= text.empty() ? 0 : 8;
    failures |= error.find("outside " + dir_.string() + " (the --files directory); not read") !=
                        std::string::npos
                    ? 0
                    : 16;
    _exit(failures == 0 ? 0 : 20 + failures);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 10) {
    GTEST_SKIP() << "seccomp filters are not allowed here";
  }
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10: no seccomp filter, 11: openat2 not refused, 20+: checks failed (bits)";
}

}  // namespace
}  // namespace kwd::importer
