#include "tests/support/command.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kwd::testing {

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

std::string ReadFileOrEmpty(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

CommandResult RunCommand(const std::string& command, const std::filesystem::path& scratch_dir) {
  std::filesystem::create_directories(scratch_dir);
  std::filesystem::path out = scratch_dir / "stdout";
  std::filesystem::path err = scratch_dir / "stderr";
  std::string line = command + " >" + ShellQuote(out.string()) + " 2>" + ShellQuote(err.string());
  int status = std::system(line.c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = ReadFileOrEmpty(out);
  result.err = ReadFileOrEmpty(err);
  return result;
}

}  // namespace kwd::testing
