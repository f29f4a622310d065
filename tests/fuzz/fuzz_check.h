#pragma once

// What fuzz targets assert with: a failed check aborts, which libFuzzer
// (and the replay driver) report as a crash with the input that caused it.

#include <cstdlib>
#include <string_view>

namespace kwd::fuzz {

inline void Check(bool condition) {
  if (!condition) {
    std::abort();
  }
}

// A C0 control character or DEL: what must never reach a log line, a header
// or a snapshot name.
inline bool HasControl(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return true;
    }
  }
  return false;
}

}  // namespace kwd::fuzz
