#include "dataplane/http/forward.h"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "dataplane/http/chars.h"

namespace kwd::http {

namespace {

bool IsAlwaysHopByHop(FieldId id) {
  return id == FieldId::kConnection || id == FieldId::kKeepAlive ||
         id == FieldId::kProxyConnection || id == FieldId::kTe || id == FieldId::kTrailer;
}

// Fields that frame or address the message: a client listing them in
// Connection must not make the proxy drop them (that would desynchronise
// the upstream connection), so nomination does not apply to them.
bool IsProtectedFromNomination(FieldId id) {
  return id == FieldId::kContentLength || id == FieldId::kHost || id == FieldId::kTransferEncoding;
}

// Names that Drop() decides before asking whether Connection nominates
// them, so a Connection element naming one changes nothing.
bool DecidedBeforeNomination(FieldId id) {
  return IsAlwaysHopByHop(id) || IsProtectedFromNomination(id) || id == FieldId::kUpgrade;
}

// The elements of a message's Connection fields that may nominate a field,
// collected once per message so that checking every field against them does
// not rescan all fields. "Connection: keep-alive" or "close, Upgrade" leave
// nothing to check (a field named "close" is still found).
struct ConnectionValues {
  static constexpr size_t kMax = 8;
  // Raw pointers and sizes, left uninitialised past `count`: string_views
  // would be zeroed on every head.
  const char* token_data[kMax];
  size_t token_size[kMax];
  size_t count = 0;
  bool overflow = false;  // more elements than kept: fall back to a scan
  std::span<const Header> fields;

  explicit ConnectionValues(std::span<const Header> all) : fields(all) {
    for (const Header& h : all) {
      if (h.Id() != FieldId::kConnection || overflow) {
        continue;
      }
      // "Connection: keep-alive", the common one: its one element names a
      // field decided before nomination.
      if (EqualsIgnoreCase(h.value, "keep-alive")) {
        continue;
      }
      ForEachListElement(h.value, [&](std::string_view element) {
        if (DecidedBeforeNomination(ClassifyFieldName(element))) {
          return true;
        }
        if (count == kMax) {
          overflow = true;
          return false;
        }
        token_data[count] = element.data();
        token_size[count] = element.size();
        ++count;
        return true;
      });
    }
  }
};

bool NamedByConnection(std::string_view name, FieldId id, const ConnectionValues& connection) {
  if ((connection.count == 0 && !connection.overflow) || IsProtectedFromNomination(id)) {
    return false;
  }
  if (connection.overflow) {
    for (const Header& h : connection.fields) {
      if (h.Id() == FieldId::kConnection && HasToken(h.value, name)) {
        return true;
      }
    }
    return false;
  }
  for (size_t i = 0; i < connection.count; ++i) {
    if (EqualsIgnoreCase(std::string_view(connection.token_data[i], connection.token_size[i]),
                         name)) {
      return true;
    }
  }
  return false;
}

// Whether to drop the field for this hop; Transfer-Encoding and Upgrade
// depend on whether the proxy re-frames or tunnels.
bool Drop(std::string_view name, FieldId id, const ConnectionValues& fields, bool reframe,
          bool tunnel) {
  if (IsAlwaysHopByHop(id)) {
    return true;
  }
  if (id == FieldId::kTransferEncoding) {
    return reframe;
  }
  if (id == FieldId::kUpgrade) {
    return !tunnel;
  }
  // Most messages' Connection fields nominate nothing: no call per field.
  return (fields.count != 0 || fields.overflow) && NamedByConnection(name, id, fields);
}

// Copies n bytes, sizeof(Word) <= n <= 2 * sizeof(Word), as two overlapping
// words (its first and its last): no call to memcpy for a short piece.
template <class Word>
void CopyEnds(char* dst, const char* src, size_t n) {
  Word head;
  Word tail;
  std::memcpy(&head, src, sizeof head);
  std::memcpy(&tail, src + n - sizeof tail, sizeof tail);
  std::memcpy(dst, &head, sizeof head);
  std::memcpy(dst + n - sizeof tail, &tail, sizeof tail);
}

// Writes a head into a string sized once for an upper bound of its length
// (no capacity check per piece), then trimmed to what was written. The sizing
// starts from what `out` holds, the last head: only bytes past it are
// zero-filled (a 4 KiB-cookie head was filled whole per request).
class HeadWriter {
 public:
  HeadWriter(std::string& out, size_t bound) : out_(&out) {
    out.resize(bound);
    begin_ = p_ = out.data();
    bound_ = bound;
  }
  // Into caller-owned memory of `bound` bytes (Finish() returns the length).
  HeadWriter(char* out, size_t bound) : p_(out), begin_(out), bound_(bound) {}
  void Put(std::string_view s) {
    const size_t n = s.size();
    const char* src = s.data();
    // Most pieces are short names and values.
    if (n >= 8 && n <= 16) {
      CopyEnds<uint64_t>(p_, src, n);
    } else if (n >= 4 && n < 8) {
      CopyEnds<uint32_t>(p_, src, n);
    } else if (n < 4) {
      for (size_t i = 0; i < n; ++i) {
        p_[i] = src[i];
      }
    } else {
      std::memcpy(p_, src, n);
    }
    p_ += n;
  }
  void Put(char c) { *p_++ = c; }
  // A string literal: its length is known here, so the copy is a few moves.
  template <size_t N>
  void PutLiteral(const char (&s)[N]) {
    std::memcpy(p_, s, N - 1);
    p_ += N - 1;
  }
  // A field whose name is a literal: "name: " is copied as one piece.
  template <size_t N>
  void LiteralField(const char (&name)[N], std::string_view value) {
    std::memcpy(p_, name, N - 1);
    p_[N - 1] = ':';
    p_[N] = ' ';
    p_ += N + 1;
    Put(value);
    p_[0] = '\r';
    p_[1] = '\n';
    p_ += 2;
  }
  void Field(std::string_view name, std::string_view value) {
    Put(name);
    Put(':');
    Put(' ');
    Put(value);
    Put('\r');
    Put('\n');
  }
  // A received field passed on unchanged: a canonical line (Header::canonical)
  // joins the run of such lines that ended just before it, copied with one
  // memcpy by Flush(); any other is written piece by piece.
  void Forward(const Header& h) {
    if (!h.canonical) {
      Flush();
      Field(h.name, h.value);
      return;
    }
    if (h.name.data() != run_end_) {
      Flush();
      run_begin_ = h.name.data();
    }
    run_end_ = h.value.data() + h.value.size() + 2;
  }
  // Writes the pending run; call before anything else is written.
  void Flush() {
    if (run_begin_ != nullptr) {
      Put(std::string_view(run_begin_, static_cast<size_t>(run_end_ - run_begin_)));
      run_begin_ = run_end_ = nullptr;
    }
  }
  size_t Finish() {
    const size_t written = static_cast<size_t>(p_ - begin_);
    if (written > bound_) {
      std::abort();  // the bound was wrong: bytes went past the memory
    }
    if (out_ != nullptr) {
      out_->resize(written);
    }
    return written;
  }

 private:
  std::string* out_ = nullptr;
  char* p_ = nullptr;
  char* begin_ = nullptr;
  size_t bound_ = 0;
  const char* run_begin_ = nullptr;
  const char* run_end_ = nullptr;
};

// What HeadWriter::Field writes at most for these fields.
size_t FieldsBound(std::span<const Header> fields) {
  size_t n = 0;
  for (const Header& h : fields) {
    n += h.name.size() + h.value.size() + 4;
  }
  return n;
}

// The name (a Content-Length field's) is spelled "Content-Length", case
// included: two 8-byte compares.
bool IsContentLengthSpelled(std::string_view name) {
  uint64_t a;
  uint64_t b;
  std::memcpy(&a, name.data(), 8);
  std::memcpy(&b, name.data() + 6, 8);
  uint64_t want_a;
  uint64_t want_b;
  std::memcpy(&want_a, "Content-", 8);
  std::memcpy(&want_b, "t-Length", 8);
  return a == want_a && b == want_b;
}

// A length is a few digits: a loop, not a call.
bool NoComma(std::string_view value) {
  for (char c : value) {
    if (c == ',') {
      return false;
    }
  }
  return true;
}

// Content-Length goes on as one field with one value: framing accepted
// several fields or a list ("5, 5") only when every value is the same, and
// the next hop may read a repeated or listed length differently. Called for
// Content-Length fields only.
void AppendContentLengthOnce(const Header& h, bool* sent, HeadWriter& out) {
  if (!*sent && h.canonical && !h.value.empty() && IsContentLengthSpelled(h.name) &&
      NoComma(h.value)) {
    // One value, already written as the first element would be.
    out.Forward(h);
    *sent = true;
    return;
  }
  out.Flush();
  if (!*sent) {
    ForEachListElement(h.value, [&](std::string_view first) {
      out.LiteralField("Content-Length", first);
      return false;
    });
    *sent = true;
  }
}

}  // namespace

bool IsForwardingField(FieldId id) {
  switch (id) {
    case FieldId::kXForwardedFor:
    case FieldId::kXForwardedProto:
    case FieldId::kXForwardedHost:
    case FieldId::kXForwardedPort:
    case FieldId::kXRealIp:
    case FieldId::kForwarded:
    case FieldId::kXRequestId:
    case FieldId::kClientProtocol:
    case FieldId::kSapWebdispAp:
    case FieldId::kForwardingAlias:
    case FieldId::kProxyAssertedTls:
      return true;
    default:
      return false;
  }
}

bool IsHopByHop(std::string_view name, std::span<const Header> fields) {
  FieldId id = ClassifyFieldName(name);
  return IsAlwaysHopByHop(id) || id == FieldId::kTransferEncoding || id == FieldId::kUpgrade ||
         NamedByConnection(name, id, ConnectionValues(fields));
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
    if (fields[f].Id() != FieldId::kXForwardedFor) {
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
    if (fields[f].Id() != FieldId::kXForwardedProto) {
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
  std::span<const Header> fields = head.fields();
  const size_t fields_bound = FieldsBound(fields);
  // Start line, Host, the fields, the proxy's own fields, the extra ones, the
  // empty line. The received X-Forwarded-For fields are not passed on as
  // they are: each field's share of fields_bound (value + 19) holds its
  // value and ", " in the one X-Forwarded-For line, whose name and CRLF the
  // 128 spare bytes hold with those of the other fields written here (79);
  // SAP's two fields' names and CRLFs take 38 of the 40 more.
  HeadWriter w(out, head.method.size() + 1 + head.target.size() + options.target.size() + 1 + 11 +
                        2 * (info.host.size() + 20) + fields_bound + options.client_ip.size() +
                        options.proto.size() + options.request_id.size() +
                        options.client_protocol.size() + options.access_points.size() +
                        FieldsBound(options.extra_headers) + 128 + 40);
  w.Put(head.method);
  w.Put(' ');
  if (!options.target.empty()) {
    w.Put(options.target);
  } else if (head.target_form == TargetForm::kAbsolute) {
    if (head.path_and_query.empty() || head.path_and_query.front() == '?') {
      w.Put('/');
    }
    w.Put(head.path_and_query);
  } else {
    w.Put(head.target);
  }
  w.PutLiteral(" HTTP/1.1\r\n");
  w.LiteralField("Host", info.host);

  bool has_forwarded_for = false;
  bool kept_client_protocol = false;
  bool kept_access_points = false;
  bool content_length_sent = false;
  const ConnectionValues connection(fields);
  const bool drop_request_id = !options.request_id.empty();
  const bool trusted = options.keep_forwarded_for;
  for (const Header& h : fields) {
    const FieldId id = h.Id();
    switch (id) {
      case FieldId::kHost:
      case FieldId::kXForwardedProto:
      case FieldId::kXForwardedHost:
      case FieldId::kProxyAssertedTls:
      case FieldId::kForwardingAlias:
        continue;
      case FieldId::kXForwardedFor:
        has_forwarded_for = true;
        continue;
      case FieldId::kForwarded:
      case FieldId::kXRealIp:
      case FieldId::kXForwardedPort:
      case FieldId::kClientProtocol:
      case FieldId::kSapWebdispAp:
        if (!trusted) {
          continue;
        }
        break;
      case FieldId::kXRequestId:
        if (drop_request_id) {
          continue;
        }
        break;
      default:
        break;
    }
    if (Drop(h.name, id, connection, options.reframe_body, options.tunnel_upgrade)) {
      continue;
    }
    if (id == FieldId::kContentLength) {
      AppendContentLengthOnce(h, &content_length_sent, w);
      continue;
    }
    kept_client_protocol = kept_client_protocol || id == FieldId::kClientProtocol;
    kept_access_points = kept_access_points || id == FieldId::kSapWebdispAp;
    w.Forward(h);
  }
  w.Flush();

  has_forwarded_for = has_forwarded_for && options.keep_forwarded_for;
  if (has_forwarded_for || !options.client_ip.empty()) {
    w.PutLiteral("X-Forwarded-For: ");
    bool first = true;
    for (const Header& h : has_forwarded_for ? fields : std::span<const Header>()) {
      if (h.Id() == FieldId::kXForwardedFor && !h.value.empty()) {
        if (!first) {
          w.PutLiteral(", ");
        }
        w.Put(h.value);
        first = false;
      }
    }
    if (!options.client_ip.empty()) {
      if (!first) {
        w.PutLiteral(", ");
      }
      w.Put(options.client_ip);
    }
    w.PutLiteral("\r\n");
  }
  w.LiteralField("X-Forwarded-Proto", options.proto);
  // The authority the request was routed by: an absolute-form target's, not
  // a Host field that the target overrides (RFC 9112 3.2.2).
  w.LiteralField("X-Forwarded-Host", info.host);
  if (options.tunnel_upgrade) {
    w.LiteralField("Connection", "Upgrade");
  }
  if (!options.request_id.empty()) {
    w.LiteralField("X-Request-Id", options.request_id);
  }
  if (!options.client_protocol.empty() && !kept_client_protocol) {
    w.LiteralField("ClientProtocol", options.client_protocol);
  }
  if (!options.access_points.empty() && !kept_access_points) {
    w.LiteralField("x-sap-webdisp-ap", options.access_points);
  }
  for (const Header& h : options.extra_headers) {
    w.Field(h.name, h.value);
  }
  w.PutLiteral("\r\n");
  w.Finish();
}

namespace {
size_t WriteResponseHead(const ResponseHead& head, const ForwardResponseOptions& options,
                         HeadWriter& w);
}  // namespace

size_t ResponseHeadBound(const ResponseHead& head, const ForwardResponseOptions& options) {
  return 16 + head.reason.size() + FieldsBound(head.fields()) + options.connection.size() +
         FieldsBound(options.extra_headers) + 64;
}

void SerializeResponseHead(const ResponseHead& head, const ForwardResponseOptions& options,
                           std::string& out) {
  HeadWriter w(out, ResponseHeadBound(head, options));
  WriteResponseHead(head, options, w);
}

size_t SerializeResponseHead(const ResponseHead& head, const ForwardResponseOptions& options,
                             char* out, size_t bound) {
  HeadWriter w(out, bound);
  return WriteResponseHead(head, options, w);
}

namespace {

size_t WriteResponseHead(const ResponseHead& head, const ForwardResponseOptions& options,
                         HeadWriter& w) {
  std::span<const Header> fields = head.fields();
  w.PutLiteral("HTTP/1.1 ");
  int code = head.status_code;
  // Unsigned: no sign fix-ups in the divisions.
  const unsigned digits = static_cast<unsigned>(code);
  w.Put(static_cast<char>('0' + (digits / 100) % 10));
  w.Put(static_cast<char>('0' + (digits / 10) % 10));
  w.Put(static_cast<char>('0' + digits % 10));
  w.Put(' ');
  w.Put(head.reason);
  w.PutLiteral("\r\n");
  const ConnectionValues connection(fields);
  bool content_length_sent = false;
  // A 1xx response has no framing (RFC 9110 8.6, RFC 9112 6.1): a server's
  // Content-Length or Transfer-Encoding on one is not passed on.
  const bool interim = code >= 100 && code < 200;
  for (const Header& h : fields) {
    const FieldId id = h.Id();
    if (Drop(h.name, id, connection, options.reframe_body, options.tunnel_upgrade) ||
        (interim && (id == FieldId::kContentLength || id == FieldId::kTransferEncoding))) {
      continue;
    }
    if (id == FieldId::kContentLength) {
      AppendContentLengthOnce(h, &content_length_sent, w);
      continue;
    }
    w.Forward(h);
  }
  w.Flush();
  if (options.tunnel_upgrade) {
    w.LiteralField("Connection", "Upgrade");
  } else if (!options.connection.empty()) {
    w.LiteralField("Connection", options.connection);
  }
  for (const Header& h : options.extra_headers) {
    w.Field(h.name, h.value);
  }
  w.PutLiteral("\r\n");
  return w.Finish();
}

}  // namespace

}  // namespace kwd::http
