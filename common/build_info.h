#pragma once

// What this binary was built from: the project version (CMakeLists.txt) and
// the git revision at configure time ("unknown" outside a git checkout;
// -DKWD_REVISION=... sets it, e.g. in an image build without .git).

#include <string>
#include <string_view>

namespace kwd {

std::string_view KwdVersion();
std::string_view KwdRevision();

// What `kwd-proxy version` and `kwd-controller version` print:
// "<program> <version> (revision <revision>)".
std::string VersionLine(std::string_view program);

}  // namespace kwd
