#include "common/version.h"

#ifndef KWD_VERSION
#define KWD_VERSION "0.0.0"
#endif
#ifndef KWD_REVISION
#define KWD_REVISION "unknown"
#endif

namespace kwd {

const char* Version() {
  return KWD_VERSION;
}

const char* Revision() {
  return KWD_REVISION;
}

std::string VersionLine(const char* program) {
  return std::string(program) + " " + Version() + " (revision " + Revision() + ")";
}

}  // namespace kwd
