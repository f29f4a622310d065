#pragma once

// The proxy's own affinity cookie: names a server of a group, signed with
// HMAC-SHA256 under a key every proxy replica shares, so any replica routes
// the holder to the same server without shared state.
//
// Value format (cookie-octets only): "<mac>.<server>" where <mac> is the
// Base64url (no padding, 22 characters) of the first 16 bytes of
// HMAC-SHA256(key, group_key + "\n" + server) and <server> is the server name
// as-is (CheckSnapshot admits only cookie-octets in server names; should
// another byte get through, SetCookieValue percent-encodes it and the cookie
// does not verify). Verification is constant time and does not allocate.

#include <memory>
#include <string>
#include <string_view>

namespace kwd::session {

class AffinityCookieCodec {
 public:
  explicit AffinityCookieCodec(std::string key);

  std::string Encode(std::string_view group_key, std::string_view server) const;
  // On success points `server` into `value` and returns true.
  bool Verify(std::string_view value, std::string_view group_key, std::string_view* server) const;

  // The Set-Cookie header value: "<name>=<value>; Path=/; HttpOnly; SameSite=Lax"
  // plus "; Secure" when the request came over https.
  static std::string SetCookieValue(std::string_view name, std::string_view value, bool secure);

 private:
  std::string key_;
  // HMAC-SHA256 pad states keyed once at construction, so Verify only
  // hashes the message (opaque here to keep OpenSSL out of the header).
  struct HmacState;
  std::shared_ptr<const HmacState> hmac_;
};

}  // namespace kwd::session
