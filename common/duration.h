#pragma once

// The one duration syntax of both binaries' flags: a non-negative integer and
// a unit, one of ms, s, m or h ("500ms", "10s", "2m", "1h"). A bare number is
// refused: "10" could mean seconds or milliseconds, and guessing wrong turns a
// 10 s timeout into 10 ms.

#include <cstdint>
#include <string>
#include <string_view>

namespace kwd {

// On success sets `*ms` and returns true; otherwise returns false with
// `error` saying what is wrong (without the flag name).
bool ParseDurationMs(std::string_view text, int64_t* ms, std::string* error);

// The inverse for defaults in --help: the largest unit that divides `ms`
// exactly ("10s", "100ms", "1h").
std::string FormatDurationMs(int64_t ms);

}  // namespace kwd
