#include "common/duration.h"

#include <charconv>
#include <limits>

namespace kwd {

bool ParseDurationMs(std::string_view text, int64_t* ms, std::string* error) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    ++digits;
  }
  if (digits == 0) {
    *error = "want a duration such as 500ms, 10s, 2m or 1h, got \"" + std::string(text) + "\"";
    return false;
  }
  std::string_view unit = text.substr(digits);
  int64_t multiplier = 0;
  if (unit == "ms") {
    multiplier = 1;
  } else if (unit == "s") {
    multiplier = 1000;
  } else if (unit == "m") {
    multiplier = 60'000;
  } else if (unit == "h") {
    multiplier = 3'600'000;
  } else if (unit.empty()) {
    *error = "\"" + std::string(text) + "\" needs a unit: ms, s, m or h (e.g. " +
             std::string(text) + "s)";
    return false;
  } else {
    *error = "unknown unit \"" + std::string(unit) + "\" in \"" + std::string(text) +
             "\": use ms, s, m or h";
    return false;
  }
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, value);
  if (ec != std::errc() || ptr != text.data() + digits ||
      value > std::numeric_limits<int64_t>::max() / multiplier) {
    *error = "duration \"" + std::string(text) + "\" is out of range";
    return false;
  }
  *ms = value * multiplier;
  return true;
}

std::string FormatDurationMs(int64_t ms) {
  if (ms != 0 && ms % 3'600'000 == 0) {
    return std::to_string(ms / 3'600'000) + "h";
  }
  if (ms != 0 && ms % 60'000 == 0) {
    return std::to_string(ms / 60'000) + "m";
  }
  if (ms != 0 && ms % 1000 == 0) {
    return std::to_string(ms / 1000) + "s";
  }
  return std::to_string(ms) + "ms";
}

}  // namespace kwd
