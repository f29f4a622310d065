#pragma once

// The host part of a Host field or authority, for comparing names: shared by
// the proxy's virtual-host lookup and the admin ports' Host check.

#include <string_view>

namespace kwd {

// "host:port" -> "host", "[v6]:port" -> "[v6]", without a trailing dot
// ("erp.example.com." names the same host).
inline std::string_view HostWithoutPort(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    return close == std::string_view::npos ? host : host.substr(0, close + 1);
  }
  size_t colon = host.find(':');
  if (colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (!host.empty() && host.back() == '.') {
    host.remove_suffix(1);
  }
  return host;
}

}  // namespace kwd
