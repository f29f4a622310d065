#pragma once

// Test support: run a command line through /bin/sh and capture its exit
// code, standard output and standard error (for black-box tests of the
// project's command-line tools).

#include <filesystem>
#include <string>

namespace kwd::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally
  std::string out;
  std::string err;
};

// Single-quotes `text` for /bin/sh.
std::string ShellQuote(const std::string& text);

// The whole file, or "" when it cannot be read.
std::string ReadFileOrEmpty(const std::filesystem::path& path);

// Runs `command` (already quoted) with its output in files under
// `scratch_dir` (created if missing), which are read back.
CommandResult RunCommand(const std::string& command, const std::filesystem::path& scratch_dir);

}  // namespace kwd::testing
