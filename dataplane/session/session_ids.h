#pragma once

// Session identifiers carried by a request (docs/internals.md, "Life of a
// request", step 3). Extraction is pure, zero-copy where possible and never
// allocates: decoded values live in the caller-owned SessionIds::scratch.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kwd::session {

// The parts of a request the extraction reads. Views into the request buffer.
struct RequestParts {
  std::string_view path;   // raw path as received, without "?query"; may hold
                           // ";name=value" path parameters and a "(...)" segment
  std::string_view query;  // raw query without the leading "?", may be empty
  std::span<const std::string_view> cookie_headers;  // values of every Cookie header
  // Base64 text inside the "(...)" bracket segment, without the brackets; empty
  // when the path has none. The router finds it while normalising the path.
  std::string_view bracket_segment;
  // The caller knows `path` holds no ";" (the router's normaliser saw none):
  // the searches for path parameters are skipped. False: not known.
  bool path_without_params = false;
};

struct SaplbCookie {
  std::string_view group;     // the cookie name after "saplb_" ("*" or a group name)
  std::string_view instance;  // from the value "(<instance>)<node>"
};

struct SessionIds {
  // sap-contextid: the <instance> of "SID:ANON:<instance>:<id>" after URL
  // decoding. Sources in priority order: cookie, query parameter,
  // ";sap-contextid=" path parameter, "s=" or "sap-contextid=" inside the
  // decoded bracket segment. Empty when absent or malformed.
  std::string_view contextid_instance;

  // Every "saplb_*" cookie with a well-formed "(<instance>)..." value, in
  // header order; at most kMaxSaplb are kept.
  static constexpr size_t kMaxSaplb = 4;
  std::array<SaplbCookie, kMaxSaplb> saplb{};
  size_t saplb_count = 0;

  // JSESSIONID from the cookie or the ";jsessionid=" path parameter (cookie
  // first). `jsessionid` is the whole value (the session-table key);
  // `jsessionid_instance` is set when the value has the form
  // "(<instance>)<id>End".
  std::string_view jsessionid;
  std::string_view jsessionid_instance;

  // ";sap-ext-sid=" path parameter value (URL-decoded).
  std::string_view ext_sid;

  // Value of the affinity cookie named by ExtractSessionIds' argument.
  std::string_view affinity_cookie;

  // Backing store for decoded values above. Values that do not fit are
  // treated as absent.
  std::array<char, 1024> scratch{};
  size_t scratch_used = 0;
};

// Fills `out` (which the caller may reuse between requests; it is reset first).
void ExtractSessionIds(const RequestParts& request, std::string_view affinity_cookie_name,
                       SessionIds* out);

// Parses "SID:ANON:<instance>:<id>" (already URL-decoded) and returns
// <instance>, or an empty view when the value has another shape.
std::string_view ContextIdInstance(std::string_view decoded_value);

// Iterates "name=value" pairs of a Cookie header value (RFC 6265 section 5.4:
// pairs separated by ";" and optional spaces; a value may be quoted).
// Returns false once `header` is exhausted.
bool NextCookie(std::string_view* header, std::string_view* name, std::string_view* value);

// Decodes %XX escapes (and "+" as a space when `plus_is_space`) into `out`.
// Returns the decoded length or -1 if it does not fit or an escape is bad.
int PercentDecode(std::string_view in, char* out, size_t capacity, bool plus_is_space);

}  // namespace kwd::session
