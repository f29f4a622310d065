#pragma once

// Serialising heads for the next hop (RFC 9110 7.6): hop-by-hop fields are
// dropped, X-Forwarded-* added. The output is a caller-owned string that is
// cleared and refilled, so a reused buffer stops allocating once it has grown.

#include <span>
#include <string>
#include <string_view>

#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"
#include "dataplane/net/cidr.h"

namespace kwd::http {

struct ForwardRequestOptions {
  std::string_view client_ip;       // appended to X-Forwarded-For
  // The peer is a trusted proxy (--trusted-proxies): the X-Forwarded-For it
  // sent is kept and client_ip appended, and its Forwarded, X-Real-IP,
  // X-Forwarded-Port, ClientProtocol and x-sap-webdisp-ap fields pass;
  // otherwise the client's own fields of these names are dropped and
  // X-Forwarded-For is client_ip alone. Other spellings of them
  // (X_Forwarded_For) never pass, nor X-Forwarded-Proto/-Host (replaced).
  bool keep_forwarded_for = false;
  // SAP's forwarding fields for ABAP servers, each sent unless empty (and
  // unless a trusted peer's field of the name was kept, SAP's
  // SetHeaderIfEmpty): "ClientProtocol: http|https" and
  // "x-sap-webdisp-ap: HTTP=80,HTTPS=443".
  std::string_view client_protocol;
  std::string_view access_points;
  std::string_view proto = "http";  // X-Forwarded-Proto: how the client reached us
  // The proxy re-frames the body (e.g. de-chunks and sends Content-Length,
  // given in extra_headers): drop Transfer-Encoding.
  bool reframe_body = false;
  // Keep Upgrade and send "Connection: Upgrade" (WebSocket tunnel).
  bool tunnel_upgrade = false;
  // Origin-form target to send instead of the received one (the path the
  // routing decided on); empty: the received target.
  std::string_view target;
  // Appended verbatim after the forwarded fields.
  std::span<const Header> extra_headers;
  // Non-empty: sent as the only X-Request-Id (the client's fields dropped).
  std::string_view request_id;
};

// What a request's forwarded fields say about its client, as far as they can
// be believed (`--trusted-proxies`).
struct ForwardedClient {
  // The client's address: from a trusted peer the right-most X-Forwarded-For
  // entry that is not itself a trusted proxy (an entry that is not an address
  // stops the walk at the last good one); otherwise the peer.
  std::string_view client_ip;
  // A trusted peer said X-Forwarded-Proto: https (the last value it sent).
  bool https = false;
};

// `peer` is the connection's client address (its PROXY header's, if any).
// The result's client_ip views `peer` or the head's fields.
ForwardedClient ResolveForwarded(const RequestHead& head, std::string_view peer,
                                 const net::CidrSet& trusted_proxies);

// Request line in origin-form (absolute-form is rewritten, its authority
// becomes Host) and HTTP/1.1; Host and X-Forwarded-Host from info.host, the
// authority the request was routed by; client-sent X-Forwarded-Proto/-Host
// and SSL_CLIENT_* / SSL_CIPHER_* fields are replaced or dropped, since only
// the proxy may assert them, and so are the other forwarding fields unless
// the peer is trusted (ForwardRequestOptions::keep_forwarded_for).
void SerializeRequestHead(const RequestHead& head, const RequestInfo& info,
                          const ForwardRequestOptions& options, std::string& out);

struct ForwardResponseOptions {
  bool reframe_body = false;    // drop Transfer-Encoding (caller adds framing)
  bool tunnel_upgrade = false;  // 101: keep Upgrade, send "Connection: Upgrade"
  // Connection field towards the client ("close", "keep-alive"), empty: none.
  std::string_view connection;
  std::span<const Header> extra_headers;
};

// Status line as HTTP/1.1, hop-by-hop fields dropped. In both directions a
// Content-Length (validated by framing: all values equal) is sent as one
// field with one value.
void SerializeResponseHead(const ResponseHead& head, const ForwardResponseOptions& options,
                           std::string& out);
// The same bytes written at `out`, which has room for `bound` =
// ResponseHeadBound(head, options) bytes (a connection's output buffer: no
// string in between); returns how many were written.
size_t ResponseHeadBound(const ResponseHead& head, const ForwardResponseOptions& options);
size_t SerializeResponseHead(const ResponseHead& head, const ForwardResponseOptions& options,
                             char* out, size_t bound);

// Whether `name` is hop-by-hop for a message with these fields: the fixed
// list (Connection, Keep-Alive, Proxy-Connection, TE, Trailer,
// Transfer-Encoding, Upgrade) or named by a Connection field.
bool IsHopByHop(std::string_view name, std::span<const Header> fields);

// Fields that say who the client is or how it connected (X-Forwarded-*,
// Forwarded, X-Real-IP, X-Request-Id, SAP's ClientProtocol and
// x-sap-webdisp-ap, SSL_CLIENT_* / SSL_CIPHER_*, and other spellings of
// them): only the proxy or a trusted peer may assert them.
bool IsForwardingField(FieldId id);

}  // namespace kwd::http
