#include "controller/sapsystem/address_policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace kwd::sapsystem {
namespace {

constexpr std::array<std::uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool IsMapped(const IpAddress& address) {
  return std::equal(kMappedPrefix.begin(), kMappedPrefix.end(), address.bytes.begin());
}

// The bit length of `address`'s family as it is compared: IPv4 (also
// IPv4-mapped) addresses compare on their last 32 bits.
bool PrefixMatches(const std::array<std::uint8_t, 16>& a, const std::array<std::uint8_t, 16>& b,
                   int bits) {
  int full = bits / 8;
  if (!std::equal(a.begin(), a.begin() + full, b.begin())) {
    return false;
  }
  int rest = bits % 8;
  if (rest == 0) {
    return true;
  }
  auto mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (a[full] & mask) == (b[full] & mask);
}

// The IPv4 address an IPv6 address carries where it can reach it, as an
// IPv4-mapped address: ::a.b.c.d (deprecated IPv4-compatible),
// ::ffff:0:a.b.c.d (IPv4-translated, RFC 2765), 64:ff9b::a.b.c.d (NAT64,
// RFC 6052) and 2002:aabb:ccdd::/48 (6to4, RFC 3056). None for others.
std::optional<IpAddress> EmbeddedIpv4(const IpAddress& address) {
  const auto& b = address.bytes;
  if (IsMapped(address)) {
    return std::nullopt;
  }
  auto zero = [](std::uint8_t x) { return x == 0; };
  static constexpr std::array<std::uint8_t, 4> kNat64 = {0, 0x64, 0xff, 0x9b};
  std::optional<std::size_t> at;  // where the four bytes are
  if (std::all_of(b.begin(), b.begin() + 12, zero)) {
    at = 12;
  } else if (std::all_of(b.begin(), b.begin() + 8, zero) && b[8] == 0xff && b[9] == 0xff &&
             b[10] == 0 && b[11] == 0) {
    at = 12;
  } else if (std::equal(kNat64.begin(), kNat64.end(), b.begin()) &&
             std::all_of(b.begin() + 4, b.begin() + 12, zero)) {
    at = 12;
  } else if (b[0] == 0x20 && b[1] == 0x02) {
    at = 2;
  }
  if (!at) {
    return std::nullopt;
  }
  IpAddress inner;
  inner.v4 = true;
  std::copy(kMappedPrefix.begin(), kMappedPrefix.end(), inner.bytes.begin());
  std::copy(b.begin() + static_cast<std::ptrdiff_t>(*at),
            b.begin() + static_cast<std::ptrdiff_t>(*at) + 4, inner.bytes.begin() + 12);
  return inner;
}

}  // namespace

std::optional<IpAddress> ParseIpAddress(std::string_view text) {
  if (text.empty() || text.size() > 45) {
    return std::nullopt;
  }
  std::string copy(text);
  IpAddress out;
  in_addr v4{};
  if (inet_pton(AF_INET, copy.c_str(), &v4) == 1) {
    std::copy(kMappedPrefix.begin(), kMappedPrefix.end(), out.bytes.begin());
    std::memcpy(out.bytes.data() + 12, &v4, 4);
    out.v4 = true;
    return out;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, copy.c_str(), &v6) == 1) {
    std::memcpy(out.bytes.data(), &v6, 16);
    return out;
  }
  return std::nullopt;
}

std::string FormatIpAddress(const IpAddress& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.v4) {
    inet_ntop(AF_INET, address.bytes.data() + 12, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, address.bytes.data(), text, sizeof(text));
  }
  return text;
}

std::optional<IpAddress> PeerAddress(std::string_view peer) {
  for (std::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (peer.starts_with(scheme)) {
      peer.remove_prefix(scheme.size());
      std::size_t colon = peer.rfind(':');
      if (colon == std::string_view::npos) {
        return std::nullopt;
      }
      peer = peer.substr(0, colon);
      if (peer.size() >= 2 && peer.front() == '[' && peer.back() == ']') {
        peer = peer.substr(1, peer.size() - 2);
      }
      return ParseIpAddress(peer);
    }
  }
  return std::nullopt;
}

bool Cidr::Contains(const IpAddress& address) const {
  if (network.v4) {
    // Also matches the IPv4-mapped IPv6 form of the address.
    return IsMapped(address) && PrefixMatches(network.bytes, address.bytes, 96 + prefix_length);
  }
  return PrefixMatches(network.bytes, address.bytes, prefix_length);
}

std::optional<Cidr> ParseCidr(std::string_view text, std::string* error) {
  std::size_t slash = text.find('/');
  std::optional<IpAddress> address = ParseIpAddress(text.substr(0, slash));
  if (!address) {
    *error = "not an IPv4 or IPv6 network (CIDR such as 10.0.0.0/8 or fd00::/8)";
    return std::nullopt;
  }
  const int max = address->v4 ? 32 : 128;
  int length = max;
  if (slash != std::string_view::npos) {
    std::string_view digits = text.substr(slash + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), length);
    if (digits.empty() || digits.size() > 3 || ec != std::errc() ||
        end != digits.data() + digits.size() || length < 0 || length > max) {
      *error = "prefix length is not 0 to " + std::to_string(max);
      return std::nullopt;
    }
  }
  Cidr cidr{*address, length};
  IpAddress zeroed = *address;
  int bits = address->v4 ? 96 + length : length;
  for (int bit = bits; bit < 128; ++bit) {
    zeroed.bytes[bit / 8] &= static_cast<std::uint8_t>(~(0x80 >> (bit % 8)));
  }
  if (!(zeroed == *address)) {
    *error = "host bits are set (did you mean " + FormatIpAddress(zeroed) + "/" +
             std::to_string(length) + "?)";
    return std::nullopt;
  }
  return cidr;
}

std::string_view SpecialAddressKind(const IpAddress& address) {
  const auto& b = address.bytes;
  if (IsMapped(address)) {
    std::uint8_t first = b[12];
    if (first == 127) {
      return "loopback";
    }
    if (first == 0) {
      return "unspecified";  // 0.0.0.0/8: "this network"; connects to the host itself
    }
    if (first == 169 && b[13] == 254) {
      return "link-local";
    }
    if (first == 100 && b[13] == 100 && b[14] == 100 && b[15] == 200) {
      return "cloud metadata";  // Alibaba Cloud's metadata service
    }
    if (first >= 224 && first <= 239) {
      return "multicast";
    }
    if (first >= 240) {
      return "broadcast";  // 240.0.0.0/4 reserved and 255.255.255.255
    }
    return "";
  }
  static constexpr std::array<std::uint8_t, 16> kZero{};
  std::array<std::uint8_t, 16> loopback{};
  loopback[15] = 1;
  if (b == kZero) {
    return "unspecified";
  }
  if (b == loopback) {
    return "loopback";
  }
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) {
    return "link-local";
  }
  if (b[0] == 0xff) {
    return "multicast";
  }
  // fd00:ec2::254: AWS's metadata service over IPv6.
  static constexpr std::array<std::uint8_t, 16> kAwsMetadata = {0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0,
                                                                0,    0, 0,    0,    0, 0, 0x02, 0x54};
  if (b == kAwsMetadata) {
    return "cloud metadata";
  }
  // Forms that can reach an IPv4 address: judged as the address they carry.
  if (std::optional<IpAddress> inner = EmbeddedIpv4(address)) {
    return SpecialAddressKind(*inner);
  }
  return "";
}

std::string RefusalReason(const AddressPolicy& policy, std::string_view text) {
  std::optional<IpAddress> address = ParseIpAddress(text);
  if (!address) {
    return "not an IP address";
  }
  auto listed = [&](const IpAddress& a) {
    return std::any_of(policy.allowed.begin(), policy.allowed.end(),
                       [&](const Cidr& cidr) { return cidr.Contains(a); });
  };
  std::string_view special = SpecialAddressKind(*address);
  if (!special.empty()) {
    return listed(*address) ? "" : std::string(special) + " address, not in spec.allowedNetworks";
  }
  const std::optional<IpAddress> inner = EmbeddedIpv4(*address);
  bool own = std::any_of(policy.own.begin(), policy.own.end(), [&](const IpAddress& mine) {
    return mine.bytes == address->bytes || (inner && mine.bytes == inner->bytes);
  });
  if (own && std::none_of(policy.allowed.begin(), policy.allowed.end(), [&](const Cidr& cidr) {
        return cidr.IsSingleAddress() && cidr.Contains(*address);
      })) {
    return "an address of the controller or of a connected proxy (list it as a single address "
           "in spec.allowedNetworks to allow it)";
  }
  if (!policy.allowed.empty() && !listed(*address)) {
    return "outside spec.allowedNetworks";
  }
  return "";
}

}  // namespace kwd::sapsystem
