#pragma once

// The PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2): a load
// balancer in front of the proxy announces the client's address in a header
// before the connection's first byte. A listener configured for it
// (`--proxy-protocol http,tls,passthrough`) requires the header and refuses a
// connection without a valid one.
//
// ReadProxyHeader is a step that runs on the raw socket before any transport
// (plain, TLS, passthrough) sees a byte: it peeks at the socket, and consumes
// exactly the header once it is complete, so whatever follows is left for
// the next layer as if the header had never been there.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kwd::net {

enum class ProxyHeaderStatus : uint8_t {
  kNeedMore,  // a valid prefix: wait for more bytes
  kDone,      // complete: see ProxyHeader
  kInvalid,   // not a PROXY v1/v2 header, or one this proxy refuses
};

struct ProxyHeader {
  size_t length = 0;  // header bytes on the wire
  int version = 0;    // 1 or 2
  // LOCAL (v2) or UNKNOWN (v1): a health check by the balancer itself, no
  // client address; the connection's own peer address stands.
  bool local = false;
  std::string source_address;  // numeric, "" when local
  uint16_t source_port = 0;
};

// v1 headers are at most 107 bytes; v2 headers with TLVs beyond this are refused.
inline constexpr size_t kMaxProxyHeaderBytes = 1024;

// Parses a header at the start of `data`. Stateless: call again with more
// bytes after kNeedMore.
ProxyHeaderStatus ParseProxyHeader(std::string_view data, ProxyHeader* out, std::string* error);

enum class ProxyReadStatus : uint8_t {
  kNeedMore,  // wait for readability and call again
  kDone,      // the header was consumed from the socket
  kInvalid,   // refuse the connection (`error` says why)
  kClosed,    // the peer closed or the socket failed before a complete header
};

// The step on a non-blocking socket: peeks, parses, and consumes the header
// when complete.
ProxyReadStatus ReadProxyHeader(int fd, ProxyHeader* out, std::string* error);

}  // namespace kwd::net
