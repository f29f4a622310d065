#include "dataplane/routing/secure_redirect.h"

namespace kwd::routing {
namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// A DNS name or IPv4 address: letters, digits, '-', '.' and '_' (seen in
// internal names), labels not empty, at most 253 bytes.
bool IsPlainHostName(std::string_view host) {
  if (host.empty() || host.size() > 253 || host.front() == '.' || host.front() == '-') {
    return false;
  }
  char previous = '\0';
  for (char c : host) {
    if (c == '.') {
      if (previous == '.') {
        return false;
      }
    } else if (!IsAlnum(c) && c != '-' && c != '_') {
      return false;
    }
    previous = c;
  }
  return true;
}

// "[v6]" with hex digits, ':' and '.' (an embedded IPv4) only: no zone id.
bool IsIpv6Literal(std::string_view host) {
  if (host.size() < 4 || host.size() > 47 || host.front() != '[' || host.back() != ']') {
    return false;
  }
  bool colon = false;
  for (char c : host.substr(1, host.size() - 2)) {
    if (c == ':') {
      colon = true;
    } else if (!IsHex(c) && c != '.') {
      return false;
    }
  }
  return colon;
}

bool IsDigits(std::string_view text) {
  if (text.size() > 5) {
    return false;
  }
  for (char c : text) {
    if (c < '0' || c > '9') {
      return false;
    }
  }
  return true;
}

// Bytes a URL may not hold as they are (controls, space, DEL, non-ASCII)
// and '\', which browsers read as '/': percent-encoded. Everything else,
// a '%' included, goes as received: the target is never decoded.
bool NeedsEncoding(unsigned char c) {
  return c <= 0x20 || c >= 0x7f || c == '\\' || c == '"' || c == '<' || c == '>';
}

}  // namespace

int SecureRedirectStatus(std::string_view method) {
  return method == "GET" || method == "HEAD" ? 301 : 308;
}

bool BuildSecureRedirectLocation(std::string_view authority, std::string_view target,
                                 uint16_t https_port, std::string* out) {
  out->clear();
  if (https_port == 0) {
    return false;
  }
  // The host part: "[v6]" or up to the port's colon; what follows must be
  // ":" and digits (or nothing). A trailing dot names the same host.
  std::string_view host;
  std::string_view rest;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return false;
    }
    host = authority.substr(0, close + 1);
    rest = authority.substr(close + 1);
    if (!IsIpv6Literal(host)) {
      return false;
    }
  } else {
    size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
    if (!host.empty() && host.back() == '.') {
      host.remove_suffix(1);
    }
    if (!IsPlainHostName(host)) {
      return false;
    }
  }
  if (!rest.empty() && (rest.front() != ':' || !IsDigits(rest.substr(1)))) {
    return false;
  }
  if (size_t hash = target.find('#'); hash != std::string_view::npos) {
    target = target.substr(0, hash);
  }
  if (target.empty() || (target.front() != '/' && target.front() != '?')) {
    return false;  // "*" (OPTIONS) or an authority-form target: nothing to redirect to
  }
  out->reserve(8 + host.size() + 6 + target.size() + 1);
  out->append("https://");
  out->append(host);
  if (https_port != 443) {
    out->push_back(':');
    out->append(std::to_string(https_port));
  }
  if (target.front() == '?') {
    out->push_back('/');  // "http://h?q": the empty path is "/"
  }
  static constexpr char kHexDigits[] = "0123456789ABCDEF";
  for (char c : target) {
    const auto byte = static_cast<unsigned char>(c);
    if (NeedsEncoding(byte)) {
      out->push_back('%');
      out->push_back(kHexDigits[byte >> 4]);
      out->push_back(kHexDigits[byte & 0x0f]);
    } else {
      out->push_back(c);
    }
  }
  return true;
}

}  // namespace kwd::routing
