#pragma once

// Character classes as 256-entry tables: the parsers test every byte.

#include <array>
#include <cstdint>

namespace kwd::http_ref::chars {

enum : uint8_t {
  kToken = 1,       // tchar (RFC 9110 5.6.2)
  kFieldValue = 2,  // VCHAR / obs-text / SP / HTAB (RFC 9110 5.5)
  kPath = 4,        // unreserved / sub-delims / ":" / "@" / "/" / "?" (RFC 3986)
  kHost = 8,        // reg-name without pct-encoding and sub-delims
};

constexpr std::array<uint8_t, 256> MakeTable() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    bool digit = c >= '0' && c <= '9';
    uint8_t v = 0;
    if (alpha || digit) {
      v |= kToken | kPath | kHost;
    }
    for (char x : {'!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~'}) {
      if (c == x) {
        v |= kToken;
      }
    }
    for (char x : {'-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':',
                   '@', '/', '?'}) {
      if (c == x) {
        v |= kPath;
      }
    }
    for (char x : {'-', '.', '_', '~'}) {
      if (c == x) {
        v |= kHost;
      }
    }
    if ((c >= 0x21 && c <= 0x7e) || c >= 0x80 || c == ' ' || c == '\t') {
      v |= kFieldValue;
    }
    t[static_cast<size_t>(c)] = v;
  }
  return t;
}

inline constexpr std::array<uint8_t, 256> kTable = MakeTable();

inline bool Is(char c, uint8_t cls) {
  return (kTable[static_cast<uint8_t>(c)] & cls) != 0;
}
inline bool IsToken(char c) {
  return Is(c, kToken);
}
inline bool IsFieldValueChar(char c) {
  return Is(c, kFieldValue);
}
inline bool IsPathChar(char c) {
  return Is(c, kPath);
}
inline bool IsHostChar(char c) {
  return Is(c, kHost);
}
inline char Lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
}

}  // namespace kwd::http_ref::chars
