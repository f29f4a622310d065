// Fuzzes the PROXY protocol v1/v2 header parser: a complete header never
// claims more bytes than it was given, and a prefix of valid input is never
// refused.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dataplane/net/proxy_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kwd::net::ProxyHeader;
  using kwd::net::ProxyHeaderStatus;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  ProxyHeader header;
  std::string error;
  const ProxyHeaderStatus status = kwd::net::ParseProxyHeader(input, &header, &error);
  if (status == ProxyHeaderStatus::kDone) {
    if (header.length == 0 || header.length > size ||
        header.length > kwd::net::kMaxProxyHeaderBytes) {
      __builtin_trap();
    }
    // Every shorter prefix of a complete header waits for more.
    for (size_t n = 0; n < header.length; ++n) {
      ProxyHeader prefix;
      if (kwd::net::ParseProxyHeader(input.substr(0, n), &prefix, &error) ==
          ProxyHeaderStatus::kInvalid) {
        // A v1 line may be refused early for a control byte only after it.
        if (header.version == 2) {
          __builtin_trap();
        }
      }
    }
  }
  return 0;
}
