// Fuzzes the Location of a redirect to HTTPS (dataplane/routing/
// secure_redirect.h) over arbitrary Host values and targets: input is one
// byte choosing the https port, then "<authority>\n<target>". A Location
// that is made starts with https://, names the input's host (never a userinfo,
// path or other host), carries the port unless it is 443, and holds no byte
// that could break the header or be read as another authority. Any violation
// aborts.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dataplane/routing/secure_redirect.h"

namespace {

void Check(bool condition) {
  if (!condition) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  static constexpr uint16_t kPorts[] = {443, 8443, 0, 80};
  const uint16_t port = kPorts[data[0] % 4];
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t newline = input.find('\n');
  std::string_view authority = input.substr(0, newline);
  std::string_view target =
      newline == std::string_view::npos ? std::string_view("/") : input.substr(newline + 1);
  std::string location = "garbage";
  const bool made = kwd::routing::BuildSecureRedirectLocation(authority, target, port, &location);
  if (!made) {
    Check(location.empty());
    return 0;
  }
  Check(port != 0);
  Check(location.starts_with("https://"));
  for (char c : location) {
    const auto byte = static_cast<unsigned char>(c);
    Check(byte > 0x20 && byte < 0x7f && c != '\\' && c != '"' && c != '<' && c != '>');
  }
  std::string_view rest = std::string_view(location).substr(8);
  const size_t path = rest.find('/');
  Check(path != std::string_view::npos && path > 0);
  std::string_view where = rest.substr(0, path);
  for (char c : where) {
    Check((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']');
  }
  // The host is the input's, as it came (a trailing dot dropped).
  std::string_view host = where;
  const std::string port_suffix = ":" + std::to_string(port);
  if (port == 443) {
    Check(where.front() == '[' ? where.back() == ']' : where.find(':') == std::string_view::npos);
  } else {
    Check(where.ends_with(port_suffix));
    host = where.substr(0, where.size() - port_suffix.size());
  }
  Check(authority.starts_with(host));
  Check(host.front() != '[' || host.back() == ']');
  // The target follows, none of it dropped but a fragment.
  std::string_view sent = rest.substr(path);
  std::string_view received = target.substr(0, target.find('#'));
  Check(sent.size() >= received.size());
  return 0;
}
