#pragma once

// The FileReader of `kwd-controller import --files DIR`: the files a
// profile names, looked up in one directory and never read from outside it.

#include <filesystem>
#include <string>

#include "controller/importer/importer.h"

namespace kwd::importer {

// Looks a named file up in `dir` (canonical): the path as written when it is
// relative and stays inside, then the file name alone. What resolves outside
// `dir` (a link out of it) or is not a regular file is refused, not read:
// the bundle is not trusted to name the operator's other files.
ReadStatus ReadFromDir(const std::filesystem::path& dir, const std::string& reference,
                       std::string* text, std::string* shown, std::string* error);

}  // namespace kwd::importer
