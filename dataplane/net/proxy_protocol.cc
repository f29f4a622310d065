#include "dataplane/net/proxy_protocol.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace kwd::net {
namespace {

constexpr std::string_view kV2Signature("\r\n\r\n\0\r\nQUIT\n", 12);
constexpr std::string_view kV1Prefix = "PROXY ";
constexpr size_t kMaxV1Bytes = 107;

ProxyHeaderStatus Invalid(std::string* error, std::string_view why) {
  if (error != nullptr) {
    error->assign(why);
  }
  return ProxyHeaderStatus::kInvalid;
}

// Splits `line` at single spaces into at most `max` fields.
size_t SplitSpaces(std::string_view line, std::string_view* fields, size_t max) {
  size_t n = 0;
  while (n < max) {
    size_t space = line.find(' ');
    fields[n++] = line.substr(0, space);
    if (space == std::string_view::npos) {
      return n;
    }
    line.remove_prefix(space + 1);
  }
  return max + 1;  // too many
}

bool ParsePort(std::string_view text, uint16_t* out) {
  if (text.empty() || text.size() > 5 || (text.size() > 1 && text[0] == '0')) {
    return false;
  }
  uint32_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return false;
    }
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > 65535) {
    return false;
  }
  *out = static_cast<uint16_t>(value);
  return true;
}

// A numeric address of family `family` in canonical form (inet_pton accepts
// only that for IPv4: no leading zeros, four parts).
bool ParseAddress(int family, std::string_view text, std::string* out) {
  if (text.empty() || text.size() > 45) {
    return false;
  }
  std::array<char, 64> buffer{};
  std::memcpy(buffer.data(), text.data(), text.size());
  std::array<unsigned char, 16> binary{};
  if (inet_pton(family, buffer.data(), binary.data()) != 1) {
    return false;
  }
  std::array<char, INET6_ADDRSTRLEN> canonical{};
  if (inet_ntop(family, binary.data(), canonical.data(), canonical.size()) == nullptr) {
    return false;
  }
  out->assign(canonical.data());
  return true;
}

ProxyHeaderStatus ParseV1(std::string_view data, ProxyHeader* out, std::string* error) {
  const size_t end = data.substr(0, kMaxV1Bytes).find("\r\n");
  if (end == std::string_view::npos) {
    if (data.size() >= kMaxV1Bytes) {
      return Invalid(error, "PROXY v1 line longer than 107 bytes");
    }
    // Refuse a line with a byte no header has before waiting for its end.
    for (char c : data) {
      if (c != '\r' && (c < ' ' || c > '~')) {
        return Invalid(error, "PROXY v1 line has a control byte");
      }
    }
    return ProxyHeaderStatus::kNeedMore;
  }
  std::string_view line = data.substr(kV1Prefix.size(), end - kV1Prefix.size());
  std::array<std::string_view, 5> f;
  const size_t n = SplitSpaces(line, f.data(), f.size());
  out->version = 1;
  out->length = end + 2;
  if (n >= 1 && f[0] == "UNKNOWN") {
    out->local = true;  // the rest of the line is ignored (spec 2.1)
    return ProxyHeaderStatus::kDone;
  }
  if (n != 5) {
    return Invalid(error, "PROXY v1 line does not have 5 fields");
  }
  int family;
  if (f[0] == "TCP4") {
    family = AF_INET;
  } else if (f[0] == "TCP6") {
    family = AF_INET6;
  } else {
    return Invalid(error, "PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN");
  }
  std::string destination;
  uint16_t destination_port = 0;
  if (!ParseAddress(family, f[1], &out->source_address) ||
      !ParseAddress(family, f[2], &destination) || !ParsePort(f[3], &out->source_port) ||
      !ParsePort(f[4], &destination_port)) {
    return Invalid(error, "PROXY v1 address or port is malformed");
  }
  out->local = false;
  return ProxyHeaderStatus::kDone;
}

ProxyHeaderStatus ParseV2(std::string_view data, ProxyHeader* out, std::string* error) {
  if (data.size() < 16) {
    return ProxyHeaderStatus::kNeedMore;
  }
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(data[i]); };
  const uint8_t version_command = byte(12);
  if ((version_command >> 4) != 2) {
    return Invalid(error, "PROXY v2 version is not 2");
  }
  const uint8_t command = version_command & 0x0F;
  if (command > 1) {
    return Invalid(error, "PROXY v2 command is not LOCAL or PROXY");
  }
  const size_t length = (static_cast<size_t>(byte(14)) << 8) | byte(15);
  if (16 + length > kMaxProxyHeaderBytes) {
    return Invalid(error, "PROXY v2 header longer than 1024 bytes");
  }
  if (data.size() < 16 + length) {
    return ProxyHeaderStatus::kNeedMore;
  }
  out->version = 2;
  out->length = 16 + length;
  const uint8_t family = byte(13);
  if (command == 0) {
    out->local = true;  // LOCAL: addresses (if any) are ignored
    return ProxyHeaderStatus::kDone;
  }
  std::string_view addresses = data.substr(16, length);
  std::array<char, INET6_ADDRSTRLEN> text{};
  switch (family) {
    case 0x11:  // TCP over IPv4
      if (addresses.size() < 12) {
        return Invalid(error, "PROXY v2 IPv4 address block too short");
      }
      inet_ntop(AF_INET, addresses.data(), text.data(), text.size());
      out->source_port = static_cast<uint16_t>((static_cast<uint8_t>(addresses[8]) << 8) |
                                               static_cast<uint8_t>(addresses[9]));
      break;
    case 0x21:  // TCP over IPv6
      if (addresses.size() < 36) {
        return Invalid(error, "PROXY v2 IPv6 address block too short");
      }
      inet_ntop(AF_INET6, addresses.data(), text.data(), text.size());
      out->source_port = static_cast<uint16_t>((static_cast<uint8_t>(addresses[32]) << 8) |
                                               static_cast<uint8_t>(addresses[33]));
      break;
    case 0x00:  // UNSPEC: no address to take (spec 2.2)
      out->local = true;
      return ProxyHeaderStatus::kDone;
    default:
      return Invalid(error, "PROXY v2 family is not TCP over IPv4 or IPv6");
  }
  out->local = false;
  out->source_address = text.data();
  return ProxyHeaderStatus::kDone;
}

}  // namespace

ProxyHeaderStatus ParseProxyHeader(std::string_view data, ProxyHeader* out, std::string* error) {
  *out = ProxyHeader{};
  // Decide on the signature as soon as the bytes so far rule one out.
  const size_t v2_prefix = std::min(data.size(), kV2Signature.size());
  if (v2_prefix > 0 && data.substr(0, v2_prefix) == kV2Signature.substr(0, v2_prefix)) {
    return v2_prefix < kV2Signature.size() ? ProxyHeaderStatus::kNeedMore
                                           : ParseV2(data, out, error);
  }
  const size_t v1_prefix = std::min(data.size(), kV1Prefix.size());
  if (data.substr(0, v1_prefix) != kV1Prefix.substr(0, v1_prefix)) {
    return Invalid(error, "no PROXY protocol header");
  }
  if (v1_prefix < kV1Prefix.size()) {
    return ProxyHeaderStatus::kNeedMore;
  }
  return ParseV1(data, out, error);
}

ProxyReadStatus ReadProxyHeader(int fd, ProxyHeader* out, std::string* error) {
  std::array<char, kMaxProxyHeaderBytes> buffer;
  ssize_t n;
  do {
    n = ::recv(fd, buffer.data(), buffer.size(), MSG_PEEK);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return ProxyReadStatus::kNeedMore;
    }
    error->assign(std::strerror(errno));
    return ProxyReadStatus::kClosed;
  }
  if (n == 0) {
    error->assign("connection closed before the PROXY protocol header");
    return ProxyReadStatus::kClosed;
  }
  switch (ParseProxyHeader(std::string_view(buffer.data(), static_cast<size_t>(n)), out, error)) {
    case ProxyHeaderStatus::kNeedMore:
      if (static_cast<size_t>(n) >= buffer.size()) {
        error->assign("PROXY protocol header too long");
        return ProxyReadStatus::kInvalid;
      }
      return ProxyReadStatus::kNeedMore;
    case ProxyHeaderStatus::kInvalid:
      return ProxyReadStatus::kInvalid;
    case ProxyHeaderStatus::kDone:
      break;
  }
  // Consume exactly the header; the peeked bytes are still queued.
  size_t left = out->length;
  while (left > 0) {
    ssize_t r = ::recv(fd, buffer.data(), left, 0);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      error->assign("failed to consume the PROXY protocol header");
      return ProxyReadStatus::kClosed;
    }
    left -= static_cast<size_t>(r);
  }
  return ProxyReadStatus::kDone;
}

}  // namespace kwd::net
