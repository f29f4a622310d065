#include "common/build_info.h"

namespace kwd {

std::string_view KwdVersion() { return KWD_BUILD_VERSION; }
std::string_view KwdRevision() { return KWD_BUILD_REVISION; }

std::string VersionLine(std::string_view program) {
  std::string line(program);
  line += ' ';
  line += KwdVersion();
  line += " (revision ";
  line += KwdRevision();
  line += ')';
  return line;
}

}  // namespace kwd
