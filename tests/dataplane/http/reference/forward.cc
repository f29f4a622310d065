#include "tests/dataplane/http/reference/forward.h"

#include <array>
#include <cstdint>

#include "tests/dataplane/http/reference/chars.h"

namespace kwd::http_ref {

namespace {

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && EqualsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

// Header names where '_' and '-' are interchangeable: some backends fold one
// into the other, so a client must not smuggle either spelling through.
bool IsProxyAssertedTlsField(std::string_view name) {
  char buffer[32];
  size_t n = name.size() < sizeof(buffer) ? name.size() : sizeof(buffer);
  for (size_t i = 0; i < n; ++i) {
    buffer[i] = name[i] == '-' ? '_' : chars::Lower(name[i]);
  }
  std::string_view folded(buffer, n);
  return StartsWithIgnoreCase(folded, "ssl_client_cert") || folded == "ssl_cipher_suite" ||
         folded == "ssl_cipher_usekeysize";
}

bool IsAlwaysHopByHop(std::string_view name) {
  return EqualsIgnoreCase(name, "connection") || EqualsIgnoreCase(name, "keep-alive") ||
         EqualsIgnoreCase(name, "proxy-connection") || EqualsIgnoreCase(name, "te") ||
         EqualsIgnoreCase(name, "trailer");
}

// Fields that frame or address the message: a client listing them in
// Connection must not make the proxy drop them (that would desynchronise
// the upstream connection), so nomination does not apply to them.
bool IsProtectedFromNomination(std::string_view name) {
  return EqualsIgnoreCase(name, "content-length") || EqualsIgnoreCase(name, "host") ||
         EqualsIgnoreCase(name, "transfer-encoding");
}

// The values of a message's Connection fields, collected once per message so
// that checking every field against them does not rescan all fields.
struct ConnectionValues {
  static constexpr size_t kMax = 8;
  std::string_view values[kMax];
  size_t count = 0;
  bool overflow = false;  // more Connection fields than kept: fall back to a scan
  std::span<const Header> fields;

  explicit ConnectionValues(std::span<const Header> all) : fields(all) {
    for (const Header& h : all) {
      if (EqualsIgnoreCase(h.name, "connection")) {
        if (count < kMax) {
          values[count++] = h.value;
        } else {
          overflow = true;
        }
      }
    }
  }
};

bool NamedByConnection(std::string_view name, const ConnectionValues& connection) {
  if (connection.count == 0 || IsProtectedFromNomination(name)) {
    return false;
  }
  if (connection.overflow) {
    for (const Header& h : connection.fields) {
      if (EqualsIgnoreCase(h.name, "connection") && HasToken(h.value, name)) {
        return true;
      }
    }
    return false;
  }
  for (size_t i = 0; i < connection.count; ++i) {
    if (HasToken(connection.values[i], name)) {
      return true;
    }
  }
  return false;
}

// Whether to drop the field for this hop; Transfer-Encoding and Upgrade
// depend on whether the proxy re-frames or tunnels.
bool Drop(std::string_view name, const ConnectionValues& fields, bool reframe, bool tunnel) {
  if (IsAlwaysHopByHop(name)) {
    return true;
  }
  if (EqualsIgnoreCase(name, "transfer-encoding")) {
    return reframe;
  }
  if (EqualsIgnoreCase(name, "upgrade")) {
    return !tunnel;
  }
  return NamedByConnection(name, fields);
}

void AppendField(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ");
  out.append(value);
  out.append("\r\n");
}

// Content-Length goes on as one field with one value: framing accepted
// several fields or a list ("5, 5") only when every value is the same, and
// the next hop may read a repeated or listed length differently. Returns
// whether `h` was Content-Length (then it is handled).
bool AppendContentLengthOnce(const Header& h, bool* sent, std::string& out) {
  if (!EqualsIgnoreCase(h.name, "content-length")) {
    return false;
  }
  if (!*sent) {
    ForEachListElement(h.value, [&](std::string_view first) {
      AppendField(out, "Content-Length", first);
      return false;
    });
    *sent = true;
  }
  return true;
}

}  // namespace

bool IsHopByHop(std::string_view name, std::span<const Header> fields) {
  return IsAlwaysHopByHop(name) || EqualsIgnoreCase(name, "transfer-encoding") ||
         EqualsIgnoreCase(name, "upgrade") || NamedByConnection(name, ConnectionValues(fields));
}

ForwardedClient ResolveForwarded(const RequestHead& head, std::string_view peer,
                                 const net::CidrSet& trusted_proxies) {
  ForwardedClient result;
  result.client_ip = peer;
  if (trusted_proxies.empty() || !trusted_proxies.Contains(peer)) {
    return result;
  }
  std::span<const Header> fields = head.fields();
  // X-Forwarded-For: the fields in order form one list; walk it from the right.
  bool walking = true;
  for (size_t f = fields.size(); walking && f-- > 0;) {
    if (!EqualsIgnoreCase(fields[f].name, "x-forwarded-for")) {
      continue;
    }
    std::string_view list = fields[f].value;
    while (walking && !list.empty()) {
      size_t comma = list.rfind(',');
      std::string_view entry =
          TrimOws(comma == std::string_view::npos ? list : list.substr(comma + 1));
      list = comma == std::string_view::npos ? std::string_view() : list.substr(0, comma);
      std::array<uint8_t, 16> bytes{};
      bool is_v4 = false;
      if (entry.empty()) {
        continue;
      }
      if (!net::ParseAddress16(entry, &bytes, &is_v4)) {
        walking = false;  // not an address: believe nothing further left
        break;
      }
      result.client_ip = entry;
      if (!trusted_proxies.Contains(entry)) {
        walking = false;
      }
    }
  }
  // X-Forwarded-Proto: the last value of the last field.
  for (size_t f = fields.size(); f-- > 0;) {
    if (!EqualsIgnoreCase(fields[f].name, "x-forwarded-proto")) {
      continue;
    }
    std::string_view value = fields[f].value;
    if (size_t comma = value.rfind(','); comma != std::string_view::npos) {
      value = value.substr(comma + 1);
    }
    result.https = EqualsIgnoreCase(TrimOws(value), "https");
    break;
  }
  return result;
}

void SerializeRequestHead(const RequestHead& head, const RequestInfo& info,
                          const ForwardRequestOptions& options, std::string& out) {
  out.clear();
  std::span<const Header> fields = head.fields();
  out.append(head.method);
  out.push_back(' ');
  if (!options.target.empty()) {
    out.append(options.target);
  } else if (head.target_form == TargetForm::kAbsolute) {
    if (head.path_and_query.empty() || head.path_and_query.front() == '?') {
      out.push_back('/');
    }
    out.append(head.path_and_query);
  } else {
    out.append(head.target);
  }
  out.append(" HTTP/1.1\r\n");
  AppendField(out, "Host", info.host);

  bool has_forwarded_for = false;
  bool content_length_sent = false;
  const ConnectionValues connection(fields);
  for (const Header& h : fields) {
    if (EqualsIgnoreCase(h.name, "host")) {
      continue;
    }
    if (EqualsIgnoreCase(h.name, "x-forwarded-for")) {
      has_forwarded_for = true;
      continue;
    }
    if (EqualsIgnoreCase(h.name, "x-forwarded-proto") ||
        EqualsIgnoreCase(h.name, "x-forwarded-host") || IsProxyAssertedTlsField(h.name) ||
        (!options.request_id.empty() && EqualsIgnoreCase(h.name, "x-request-id")) ||
        Drop(h.name, connection, options.reframe_body, options.tunnel_upgrade) ||
        AppendContentLengthOnce(h, &content_length_sent, out)) {
      continue;
    }
    AppendField(out, h.name, h.value);
  }

  has_forwarded_for = has_forwarded_for && options.keep_forwarded_for;
  if (has_forwarded_for || !options.client_ip.empty()) {
    out.append("X-Forwarded-For: ");
    bool first = true;
    for (const Header& h : fields) {
      if (has_forwarded_for && EqualsIgnoreCase(h.name, "x-forwarded-for") && !h.value.empty()) {
        if (!first) {
          out.append(", ");
        }
        out.append(h.value);
        first = false;
      }
    }
    if (!options.client_ip.empty()) {
      if (!first) {
        out.append(", ");
      }
      out.append(options.client_ip);
    }
    out.append("\r\n");
  }
  AppendField(out, "X-Forwarded-Proto", options.proto);
  // The authority the request was routed by: an absolute-form target's, not
  // a Host field that the target overrides (RFC 9112 3.2.2).
  AppendField(out, "X-Forwarded-Host", info.host);
  if (options.tunnel_upgrade) {
    AppendField(out, "Connection", "Upgrade");
  }
  if (!options.request_id.empty()) {
    AppendField(out, "X-Request-Id", options.request_id);
  }
  for (const Header& h : options.extra_headers) {
    AppendField(out, h.name, h.value);
  }
  out.append("\r\n");
}

void SerializeResponseHead(const ResponseHead& head, const ForwardResponseOptions& options,
                           std::string& out) {
  out.clear();
  std::span<const Header> fields = head.fields();
  out.append("HTTP/1.1 ");
  int code = head.status_code;
  out.push_back(static_cast<char>('0' + (code / 100) % 10));
  out.push_back(static_cast<char>('0' + (code / 10) % 10));
  out.push_back(static_cast<char>('0' + code % 10));
  out.push_back(' ');
  out.append(head.reason);
  out.append("\r\n");
  const ConnectionValues connection(fields);
  bool content_length_sent = false;
  const bool interim = code >= 100 && code < 200;
  for (const Header& h : fields) {
    if (Drop(h.name, connection, options.reframe_body, options.tunnel_upgrade) ||
        (interim && (EqualsIgnoreCase(h.name, "content-length") ||
                     EqualsIgnoreCase(h.name, "transfer-encoding"))) ||
        AppendContentLengthOnce(h, &content_length_sent, out)) {
      continue;
    }
    AppendField(out, h.name, h.value);
  }
  if (options.tunnel_upgrade) {
    AppendField(out, "Connection", "Upgrade");
  } else if (!options.connection.empty()) {
    AppendField(out, "Connection", options.connection);
  }
  for (const Header& h : options.extra_headers) {
    AppendField(out, h.name, h.value);
  }
  out.append("\r\n");
}

}  // namespace kwd::http_ref
