#include "dataplane/http/access_log_mask.h"

#include "common/crypto.h"
#include "dataplane/http/parser.h"

namespace kwd::http {

namespace {

// Room for the longest sensitive name ("sap-contextid") and trailing spaces;
// a longer decoded name is none of them.
constexpr size_t kLongestSensitiveName = 31;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  c = static_cast<char>(c | 0x20);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

// Decodes %XX escapes of `name` into `out` (the name a backend compares),
// dropping surrounding spaces. False when an escape is malformed or the
// decoded name cannot be one of the sensitive names (too long).
bool DecodeName(std::string_view name, char (&out)[kLongestSensitiveName + 1], size_t* length) {
  size_t n = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '%') {
      int hi = i + 2 < name.size() ? HexDigit(name[i + 1]) : -1;
      int lo = hi >= 0 ? HexDigit(name[i + 2]) : -1;
      if (lo < 0) {
        return false;
      }
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == ' ' && n == 0) {
      continue;  // a leading space, as in "a=1; %20name=v"
    }
    if (n == sizeof(out)) {
      return false;
    }
    out[n++] = c;
  }
  while (n > 0 && out[n - 1] == ' ') {
    --n;
  }
  *length = n;
  return true;
}

}  // namespace

bool IsSensitiveParameter(std::string_view name) {
  char buffer[kLongestSensitiveName + 1];
  size_t length = 0;
  if (name.find('%') != std::string_view::npos) {
    if (!DecodeName(name, buffer, &length)) {
      return false;
    }
    name = std::string_view(buffer, length);
  }
  return EqualsIgnoreCase(name, "sap-contextid") || EqualsIgnoreCase(name, "jsessionid") ||
         EqualsIgnoreCase(name, "mysapsso2") || EqualsIgnoreCase(name, "sap-password") ||
         EqualsIgnoreCase(name, "sap-r3auth");
}

namespace {

// Appends `name=value` pairs separated by `separator`, masking sensitive
// values; text without '=' is copied unchanged.
void AppendMaskedPairs(std::string_view text, char separator, std::string& out) {
  while (true) {
    size_t end = text.find(separator);
    std::string_view pair = text.substr(0, end);
    size_t eq = pair.find('=');
    std::string_view name = pair.substr(0, eq);
    while (!name.empty() && name.front() == ' ') {
      name.remove_prefix(1);
    }
    if (eq != std::string_view::npos && IsSensitiveParameter(name)) {
      out.append(pair.substr(0, eq + 1));
      out.append(kMask);
    } else {
      out.append(pair);
    }
    if (end == std::string_view::npos) {
      return;
    }
    out.push_back(separator);
    text.remove_prefix(end + 1);
  }
}

// BSP URL mangling: "(bD1lbiZjPTAwMQ==)" holds "l=en&c=001" and, in
// cookieless sessions, the context id (as "s=" or "sap-contextid=").
bool BracketHoldsContextId(std::string_view encoded) {
  char decoded[1024];
  int n = Base64Decode(encoded, decoded, sizeof(decoded));
  if (n <= 0) {
    return false;
  }
  std::string_view text(decoded, static_cast<size_t>(n));
  while (!text.empty()) {
    size_t amp = text.find('&');
    std::string_view pair = text.substr(0, amp);
    std::string_view name = pair.substr(0, pair.find('='));
    if (EqualsIgnoreCase(name, "s") || IsSensitiveParameter(name)) {
      return true;
    }
    if (amp == std::string_view::npos) {
      break;
    }
    text.remove_prefix(amp + 1);
  }
  return false;
}

void AppendMaskedSegment(std::string_view segment, std::string& out) {
  // Path parameters: "name;a=b;jsessionid=x".
  size_t semicolon = segment.find(';');
  std::string_view base = segment.substr(0, semicolon);
  size_t open = base.find('(');
  if (open != std::string_view::npos && base.back() == ')' &&
      BracketHoldsContextId(base.substr(open + 1, base.size() - open - 2))) {
    out.append(base.substr(0, open + 1));
    out.append(kMask);
    out.push_back(')');
  } else {
    out.append(base);
  }
  if (semicolon != std::string_view::npos) {
    out.push_back(';');
    AppendMaskedPairs(segment.substr(semicolon + 1), ';', out);
  }
}

}  // namespace

void AppendMaskedTarget(std::string_view target, std::string& out) {
  size_t question = target.find('?');
  std::string_view path = target.substr(0, question);
  while (true) {
    size_t slash = path.find('/');
    AppendMaskedSegment(path.substr(0, slash), out);
    if (slash == std::string_view::npos) {
      break;
    }
    out.push_back('/');
    path.remove_prefix(slash + 1);
  }
  if (question != std::string_view::npos) {
    out.push_back('?');
    AppendMaskedPairs(target.substr(question + 1), '&', out);
  }
}

void AppendMaskedCookies(std::string_view cookie_header, std::string& out) {
  AppendMaskedPairs(cookie_header, ';', out);
}

void AppendMaskedFieldValue(std::string_view name, std::string_view value, std::string& out) {
  if (EqualsIgnoreCase(name, "authorization") || EqualsIgnoreCase(name, "proxy-authorization")) {
    out.append(kMask);
  } else if (EqualsIgnoreCase(name, "cookie")) {
    AppendMaskedCookies(value, out);
  } else {
    out.append(value);
  }
}

}  // namespace kwd::http
