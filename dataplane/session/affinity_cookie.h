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
//
// Key rotation: Rotate(new_key, grace) signs with the new key from then on and
// still accepts cookies signed with the key it replaces for `grace`, so that
// sessions in flight stay sticky while every replica picks up the new key.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kwd::session {

class AffinityCookieCodec {
 public:
  explicit AffinityCookieCodec(std::string key);
  AffinityCookieCodec(const AffinityCookieCodec& other);
  AffinityCookieCodec& operator=(const AffinityCookieCodec&) = delete;

  std::string Encode(std::string_view group_key, std::string_view server) const;
  // On success points `server` into `value` and returns true.
  // Accepts the current key and, within its grace period, the previous one.
  bool Verify(std::string_view value, std::string_view group_key, std::string_view* server) const;

  // Thread-safe against concurrent Encode/Verify. A key equal to the current
  // one changes nothing. `grace` 0 drops the previous key at once.
  void Rotate(std::string_view key, std::chrono::milliseconds grace);

  // The Set-Cookie header value: "<name>=<value>; Path=/; HttpOnly; SameSite=Lax"
  // plus "; Secure" when the request came over https.
  static std::string SetCookieValue(std::string_view name, std::string_view value, bool secure);

 private:
  // HMAC-SHA256 pad states of the current and the previous key, keyed once
  // per rotation, so Verify only hashes the message (opaque here to keep
  // OpenSSL out of the header). Replaced as a whole on Rotate.
  struct HmacState;
  // Base64url of the truncated MAC under `state`, from this thread's cache
  // of recent (group, server) pairs when it holds it.
  static std::array<char, 22> CurrentMac(const HmacState& state, std::string_view group_key,
                                         std::string_view server);
  // The current state, from this thread's copy while `generation_` says it
  // is still current. hmac_.load() writes memory every worker shares (a lock
  // bit in hmac_ and the state's reference count, twice): per request on
  // every worker, that is a cache line bouncing between cores.
  const HmacState& ThisThreadState() const;
  std::atomic<std::shared_ptr<const HmacState>> hmac_;
  // hmac_'s generation (unique in the process): written by Rotate only.
  std::atomic<uint64_t> generation_;
};

}  // namespace kwd::session
