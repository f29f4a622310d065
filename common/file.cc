#include "common/file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kwd {

bool ReadWholeFile(const std::string& path, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (error != nullptr) {
      *error = "cannot read " + path + ": " + std::strerror(errno);
    }
    return false;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return true;
}

}  // namespace kwd
