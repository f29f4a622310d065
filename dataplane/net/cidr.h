#pragma once

// Address ranges in CIDR notation ("10.0.0.0/8", "2001:db8::/32", or a bare
// address for one host): `--trusted-proxies`. IPv4-mapped IPv6 peers
// ("::ffff:10.1.2.3") match IPv4 ranges.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::net {

class CidrSet {
 public:
  // Adds every comma-separated range of `list`; false with `error` naming the
  // bad entry.
  bool Parse(std::string_view list, std::string* error);
  // Whether the numeric address `address` lies in one of the ranges; false
  // for anything that is not an address.
  bool Contains(std::string_view address) const;
  bool empty() const { return ranges_.empty(); }

 private:
  struct Range {
    std::array<uint8_t, 16> bytes{};  // IPv4 as IPv4-mapped IPv6
    int prefix = 0;                   // of the 128 bits
  };
  std::vector<Range> ranges_;
};

// Parses a numeric IPv4 or IPv6 address into 16 bytes (IPv4 mapped into
// IPv6); false if it is not one.
bool ParseAddress16(std::string_view address, std::array<uint8_t, 16>* out, bool* is_v4);

}  // namespace kwd::net
