#include "dataplane/proxy/request_id.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <random>

namespace kwd::proxy {

namespace {

bool IsLowerHex(std::string_view text) {
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

bool AllZero(std::string_view text) { return text.find_first_not_of('0') == std::string_view::npos; }

}  // namespace

bool ValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) {
    return false;
  }
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '+' || c == '/' || c == '=' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

void GenerateRequestId(std::string* out) {
  // One generator per worker thread, seeded once: ids must be unique, not
  // secret. SplitMix64 (a Weyl sequence through a bijective mixer): every
  // 64-bit output is distinct over 2^64 calls, for a tenth of mt19937_64's
  // cost per id.
  thread_local uint64_t state = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  auto next = [] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  // Two hex digits per byte from a table: 16 look-ups per id instead of 32.
  static constexpr auto kHexPairs = [] {
    std::array<char, 512> t{};
    constexpr char kHex[] = "0123456789abcdef";
    for (int b = 0; b < 256; ++b) {
      t[static_cast<size_t>(2 * b)] = kHex[b >> 4];
      t[static_cast<size_t>(2 * b + 1)] = kHex[b & 0xf];
    }
    return t;
  }();
  out->resize(32);
  char* p = out->data();
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = next();
    for (int i = 0; i < 8; ++i, bits >>= 8) {
      std::memcpy(p, &kHexPairs[2 * (bits & 0xff)], 2);
      p += 2;
    }
  }
}

std::string_view TraceIdFromTraceparent(std::string_view value) {
  // version "-" trace-id "-" parent-id "-" flags: 2, 32, 16 and 2 hex digits.
  // A later version may append "-..." fields; version 00 may not.
  constexpr size_t kLength = 55;
  if (value.size() < kLength || value[2] != '-' || value[35] != '-' || value[52] != '-') {
    return {};
  }
  std::string_view version = value.substr(0, 2);
  std::string_view trace_id = value.substr(3, 32);
  std::string_view parent_id = value.substr(36, 16);
  std::string_view flags = value.substr(53, 2);
  if (!IsLowerHex(version) || version == "ff" || !IsLowerHex(trace_id) ||
      !IsLowerHex(parent_id) || !IsLowerHex(flags) || AllZero(trace_id) || AllZero(parent_id)) {
    return {};
  }
  if (value.size() > kLength && (version == "00" || value[kLength] != '-')) {
    return {};
  }
  return trace_id;
}

}  // namespace kwd::proxy
