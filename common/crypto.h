#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kwd {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest Sha256(std::string_view data);
Sha256Digest HmacSha256(std::string_view key, std::string_view data);

// Lowercase hexadecimal of any byte range.
std::string HexEncode(const uint8_t* data, size_t size);
inline std::string HexEncode(const Sha256Digest& d) { return HexEncode(d.data(), d.size()); }

// Value of one hexadecimal digit (either case), or -1.
inline int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

// Base64url without padding (RFC 4648 section 5), as cookie values need.
std::string Base64UrlEncode(std::string_view data);
// Standard Base64 with padding (RFC 4648 section 4), as Kubernetes Secret
// data carries it.
std::string Base64Encode(std::string_view data);

// Decodes standard or URL-safe Base64, padding optional. Writes at most
// `out_capacity` bytes to `out`; returns the decoded length, or -1 when the
// input is not Base64 or does not fit. Never allocates.
int Base64Decode(std::string_view in, char* out, size_t out_capacity);

// Constant-time comparison for MACs.
bool ConstantTimeEqual(std::string_view a, std::string_view b);

}  // namespace kwd
