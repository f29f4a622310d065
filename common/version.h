#pragma once

// What `kwd-proxy version` and `kwd-controller version` print: the release
// (CMake project version) and the git revision the binary was built from
// ("unknown" outside a git checkout).

#include <string>

namespace kwd {

const char* Version();
const char* Revision();

// "<program> <version> (revision <revision>)".
std::string VersionLine(const char* program);

}  // namespace kwd
