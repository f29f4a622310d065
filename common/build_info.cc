#include "common/build_info.h"

namespace kwd {

std::string_view KwdVersion() { return KWD_BUILD_VERSION; }
std::string_view KwdRevision() { return KWD_BUILD_REVISION; }

}  // namespace kwd
