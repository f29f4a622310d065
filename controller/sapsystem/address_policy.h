#pragma once

// Which addresses an SAP system may send kwd to. The message server lists
// the application servers' hosts; the proxies then route public traffic
// there and the controller fetches the group and URL-map feeds from them.
// A list that names 127.0.0.1, 0.0.0.0, 169.254.169.254 (cloud metadata), the
// controller's or a proxy's own address would turn kwd into a path to what
// only the pod itself should reach (its admin port, its metrics). So, by
// default:
//
//   - loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10),
//     unspecified ("this network" 0.0.0.0/8, ::), multicast and broadcast
//     (224.0.0.0/4, 240.0.0.0/4, ff00::/8) are refused unless a CIDR of
//     spec.allowedNetworks contains the address;
//   - the controller's own addresses (its interfaces) and those of the
//     proxies connected to it (their gRPC peer addresses) are refused unless
//     spec.allowedNetworks lists the address itself (/32 or /128);
//   - with spec.allowedNetworks set, any address outside every listed CIDR
//     is refused.
//
// IPv4-mapped IPv6 addresses (::ffff:127.0.0.1) are judged as the IPv4
// address they carry. Pure: no I/O.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwd::sapsystem {

// An IPv4 address is held as IPv4-mapped IPv6 (::ffff:a.b.c.d), so one
// comparison covers both families.
struct IpAddress {
  std::array<std::uint8_t, 16> bytes{};
  bool v4 = false;  // written and parsed as a.b.c.d

  bool operator==(const IpAddress&) const = default;
};

// inet_pton of either family; nullopt for anything else (host names, zones).
std::optional<IpAddress> ParseIpAddress(std::string_view text);
std::string FormatIpAddress(const IpAddress& address);
// The address of a gRPC peer ("ipv4:10.1.2.3:41000", "ipv6:[fd00::7]:41000");
// nullopt for anything else (a Unix socket).
std::optional<IpAddress> PeerAddress(std::string_view peer);

struct Cidr {
  IpAddress network;   // host bits zero
  int prefix_length = 0;  // in the written family: 0-32 for IPv4, 0-128 for IPv6

  bool Contains(const IpAddress& address) const;
  bool IsSingleAddress() const { return prefix_length == (network.v4 ? 32 : 128); }
  bool operator==(const Cidr&) const = default;
};

// "10.0.0.0/8", "fd00::/8", "192.0.2.7" (a single address: /32 or /128).
// Host bits must be zero ("10.1.0.0/8" is refused: it is almost always a
// typo for 10.1.0.0/16). `error` says why not, without the value.
std::optional<Cidr> ParseCidr(std::string_view text, std::string* error);

// What kind of special address it is, or "" for an ordinary one: loopback,
// link-local, unspecified, multicast, broadcast.
std::string_view SpecialAddressKind(const IpAddress& address);

struct AddressPolicy {
  std::vector<Cidr> allowed;         // spec.allowedNetworks; empty: any ordinary address
  std::vector<IpAddress> own;        // the controller's and its proxies' addresses

  bool operator==(const AddressPolicy&) const = default;
};

// Why `address` (text, as resolved) is refused, or "" when it is accepted:
// "loopback address, not in spec.allowedNetworks",
// "an address of the controller or of a connected proxy (...)",
// "outside spec.allowedNetworks",
// "not an IP address".
std::string RefusalReason(const AddressPolicy& policy, std::string_view address);

}  // namespace kwd::sapsystem
