#pragma once

// Short-string primitives for the request path: a fast non-cryptographic
// hash and an inline equality test.
//
// A fast non-cryptographic hash for short strings (names, session ids) on the
// request path: a few 64x64->128-bit multiplications in the style of wyhash,
// reading the bytes a word at a time. std::hash (MurmurHash over bytes) costs
// several times more for the 5-40 byte keys the routing tables look up.
// Not for untrusted-input DoS resistance beyond what a fixed seed gives; the
// tables that use it are bounded.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace kwd {

namespace string_hash_internal {

__extension__ typedef unsigned __int128 Uint128;

inline constexpr uint64_t kSecret0 = 0xa0761d6478bd642full;
inline constexpr uint64_t kSecret1 = 0xe7037ed1a0b428dbull;
inline constexpr uint64_t kSecret2 = 0x8ebc6af09c88c6e3ull;

inline uint64_t Mum(uint64_t a, uint64_t b) {
  const Uint128 product = Uint128{a} * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}
inline uint64_t Read8(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t Read4(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace string_hash_internal

inline uint64_t HashString(std::string_view s, uint64_t seed = 0) {
  using namespace string_hash_internal;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  seed ^= kSecret0;
  uint64_t a;
  uint64_t b;
  if (n <= 16) {
    if (n >= 4) {
      const size_t middle = (n >> 3) << 2;  // 0 for n < 8, else 4
      a = (Read4(p) << 32) | Read4(p + middle);
      b = (Read4(p + n - 4) << 32) | Read4(p + n - 4 - middle);
    } else if (n > 0) {
      a = (uint64_t{p[0]} << 16) | (uint64_t{p[n >> 1]} << 8) | p[n - 1];
      b = 0;
    } else {
      a = 0;
      b = 0;
    }
  } else {
    size_t remaining = n;
    while (remaining > 16) {
      seed = Mum(Read8(p) ^ kSecret1, Read8(p + 8) ^ seed);
      p += 16;
      remaining -= 16;
    }
    a = Read8(p + remaining - 16);
    b = Read8(p + remaining - 8);
  }
  return Mum(kSecret1 ^ n, Mum(a ^ kSecret1, b ^ seed ^ kSecret2));
}

// Lowercases the ASCII letters among 8 bytes at once (SWAR): a byte is an
// uppercase letter when its top bit is clear and its low 7 bits lie in
// ['A', 'Z']; adding 0x3f / 0x25 to the low 7 bits carries into the top bit
// exactly when they are >= 'A' / > 'Z', and never into the next byte.
inline uint64_t AsciiLowerWord(uint64_t word) {
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7full;
  constexpr uint64_t kTop = 0x8080808080808080ull;
  const uint64_t low = word & kLow7;
  const uint64_t at_least_a = low + 0x3f3f3f3f3f3f3f3full;
  const uint64_t above_z = low + 0x2525252525252525ull;
  const uint64_t upper = (at_least_a ^ above_z) & ~word & kTop;
  return word | (upper >> 2);
}

// Whether the `size` bytes at `a` and `b` are equal. Inline word compares for
// the short keys of the routing tables (names, path prefixes), where a call
// to memcmp costs more than the comparison itself.
inline bool BytesEqual(const char* a, const char* b, size_t size) {
  using namespace string_hash_internal;
  const auto* x = reinterpret_cast<const unsigned char*>(a);
  const auto* y = reinterpret_cast<const unsigned char*>(b);
  if (size >= 8) {
    if (size > 16) {
      return std::memcmp(a, b, size) == 0;
    }
    // Two words that overlap when size < 16 cover every byte.
    return Read8(x) == Read8(y) && Read8(x + size - 8) == Read8(y + size - 8);
  }
  if (size >= 4) {
    return Read4(x) == Read4(y) && Read4(x + size - 4) == Read4(y + size - 4);
  }
  for (size_t i = 0; i < size; ++i) {
    if (x[i] != y[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace kwd
