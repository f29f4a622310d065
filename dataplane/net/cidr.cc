#include "dataplane/net/cidr.h"

#include <arpa/inet.h>

#include <cstring>

namespace kwd::net {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') {
    s.remove_prefix(1);
  }
  while (!s.empty() && s.back() == ' ') {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

bool ParseAddress16(std::string_view address, std::array<uint8_t, 16>* out, bool* is_v4) {
  if (address.empty() || address.size() > 45) {
    return false;
  }
  std::array<char, 48> text{};
  std::memcpy(text.data(), address.data(), address.size());
  out->fill(0);
  std::array<uint8_t, 4> v4{};
  if (inet_pton(AF_INET, text.data(), v4.data()) == 1) {
    (*out)[10] = 0xFF;
    (*out)[11] = 0xFF;
    std::memcpy(out->data() + 12, v4.data(), 4);
    *is_v4 = true;
    return true;
  }
  if (inet_pton(AF_INET6, text.data(), out->data()) == 1) {
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    *is_v4 = std::memcmp(out->data(), kMapped, 12) == 0;
    return true;
  }
  return false;
}

bool CidrSet::Parse(std::string_view list, std::string* error) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view entry = Trim(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (entry.empty()) {
      continue;
    }
    std::string_view address = entry;
    int prefix = -1;
    if (size_t slash = entry.find('/'); slash != std::string_view::npos) {
      address = entry.substr(0, slash);
      std::string_view digits = entry.substr(slash + 1);
      if (digits.empty() || digits.size() > 3) {
        *error = "\"" + std::string(entry) + "\" has a bad prefix length";
        return false;
      }
      prefix = 0;
      for (char c : digits) {
        if (c < '0' || c > '9') {
          *error = "\"" + std::string(entry) + "\" has a bad prefix length";
          return false;
        }
        prefix = prefix * 10 + (c - '0');
      }
    }
    Range range;
    bool is_v4 = false;
    if (!ParseAddress16(address, &range.bytes, &is_v4)) {
      *error = "\"" + std::string(entry) + "\" is not an IPv4 or IPv6 address or CIDR range";
      return false;
    }
    // The prefix length counts the bits of the notation used: an
    // IPv4-mapped range written the IPv6 way ("::ffff:10.0.0.0/104") has 128.
    const bool v4_notation = address.find(':') == std::string_view::npos;
    const int max_prefix = v4_notation ? 32 : 128;
    if (prefix < 0) {
      prefix = max_prefix;
    }
    if (prefix > max_prefix) {
      *error =
          "\"" + std::string(entry) + "\" has a prefix length above " + std::to_string(max_prefix);
      return false;
    }
    range.prefix = v4_notation ? 96 + prefix : prefix;
    ranges_.push_back(range);
  }
  return true;
}

bool CidrSet::Contains(std::string_view address) const {
  std::array<uint8_t, 16> bytes{};
  bool is_v4 = false;
  if (ranges_.empty() || !ParseAddress16(address, &bytes, &is_v4)) {
    return false;
  }
  for (const Range& r : ranges_) {
    int full = r.prefix / 8;
    int bits = r.prefix % 8;
    if (std::memcmp(bytes.data(), r.bytes.data(), static_cast<size_t>(full)) != 0) {
      continue;
    }
    if (bits != 0) {
      uint8_t mask = static_cast<uint8_t>(0xFF << (8 - bits));
      if ((bytes[full] & mask) != (r.bytes[full] & mask)) {
        continue;
      }
    }
    return true;
  }
  return false;
}

}  // namespace kwd::net
