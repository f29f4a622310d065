#pragma once

#include <string>

namespace kwd {

// Reads a whole file. On failure returns false and, when `error` is given,
// sets it to "cannot read PATH: <reason>".
bool ReadWholeFile(const std::string& path, std::string* out, std::string* error = nullptr);

}  // namespace kwd
