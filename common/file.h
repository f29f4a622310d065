#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace kwd {

// Reads a whole file. On failure returns false and, when `error` is given,
// sets it to "cannot read PATH: <reason>".
bool ReadWholeFile(const std::string& path, std::string* out, std::string* error = nullptr);

// Replaces `path` with `content` so that a reader (or a restart after a
// crash) sees the old file or the new one, never a part: writes PATH.tmp.PID in
// the same directory (created afresh with `mode`, never through a symbolic
// link someone left at that name), syncs it to disk and renames it over PATH.
// On failure returns false, sets `error` to "cannot write PATH: <reason>" and leaves no
// temporary file behind.
bool WriteFileAtomically(const std::string& path, std::string_view content, std::string* error,
                         mode_t mode = 0644);

}  // namespace kwd
