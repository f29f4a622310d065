#pragma once

// The redirect a `secure` permission entry answers a plain-http request with
// when its UrlMapping says `secureAction: redirect` (issue 24 item 3).
//
// The Location is built from bytes the client sent, so it is built
// defensively: the host must be a plain DNS name, IPv4 address or bracketed
// IPv6 literal (no userinfo, no percent-encoding, no sub-delimiters, no
// slash or backslash, no control bytes), so that no Host value can turn the
// answer into a redirect to another site; the path and query go as received
// (never decoded), with only bytes that may not appear in a URL
// percent-encoded.

#include <cstdint>
#include <string>
#include <string_view>

namespace kwd::routing {

// The status of the redirect: 301 for GET and HEAD (understood by every
// client, cached by browsers like the HSTS that should follow), 308 for
// every other method, which keeps the method and the body (RFC 9110 15.4.9;
// a 301 lets clients turn a POST into a GET).
int SecureRedirectStatus(std::string_view method);

// Writes "https://<host>[:<port>]<target>" into `out` (cleared first).
// `authority` is the request's Host value or absolute-form authority (its
// port is dropped); `target` the origin-form target as received ("/p?q", or
// "?q" for "http://h?q"; a fragment is dropped). `https_port` is left out
// when 443. False, with `out` cleared, when the authority is no host a
// redirect may name, the target is not origin-form, or the port is 0.
bool BuildSecureRedirectLocation(std::string_view authority, std::string_view target,
                                 uint16_t https_port, std::string* out);

}  // namespace kwd::routing
