#include "dataplane/session/affinity_cookie.h"

#include <openssl/crypto.h>

#include <array>
#include <cstring>
#include <string_view>

#include "common/string_hash.h"

// The one-shot HMAC()/EVP APIs allocate a context per call (OPENSSL_malloc),
// and Verify runs per request. The low-level SHA256_CTX is a plain struct,
// so HMAC is computed from precomputed inner/outer pad states copied by
// value: no allocation, constant work for a given input length. Those
// functions are marked deprecated in OpenSSL 3 but are still shipped.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <openssl/sha.h>

namespace kwd::session {
namespace {

constexpr size_t kMacBytes = 16;
constexpr size_t kMacChars = 22;  // Base64url of 16 bytes, no padding
constexpr size_t kBlockSize = 64;

struct HmacPads {
  SHA256_CTX inner;
  SHA256_CTX outer;
};

HmacPads PrecomputePads(std::string_view key) {
  std::array<unsigned char, kBlockSize> block{};
  if (key.size() > kBlockSize) {
    SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), block.data());
  } else {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::array<unsigned char, kBlockSize> pad{};
  HmacPads pads;
  for (size_t i = 0; i < kBlockSize; ++i) {
    pad[i] = block[i] ^ 0x36;
  }
  SHA256_Init(&pads.inner);
  SHA256_Update(&pads.inner, pad.data(), pad.size());
  for (size_t i = 0; i < kBlockSize; ++i) {
    pad[i] = block[i] ^ 0x5c;
  }
  SHA256_Init(&pads.outer);
  SHA256_Update(&pads.outer, pad.data(), pad.size());
  OPENSSL_cleanse(block.data(), block.size());
  OPENSSL_cleanse(pad.data(), pad.size());
  return pads;
}

// Base64url (no padding) of HMAC-SHA256(key, group_key "\n" server)[0:16].
std::array<char, kMacChars> ComputeMac(const HmacPads& pads, std::string_view group_key,
                                       std::string_view server) {
  SHA256_CTX ctx = pads.inner;
  SHA256_Update(&ctx, group_key.data(), group_key.size());
  SHA256_Update(&ctx, "\n", 1);
  SHA256_Update(&ctx, server.data(), server.size());
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  SHA256_Final(digest.data(), &ctx);
  ctx = pads.outer;
  SHA256_Update(&ctx, digest.data(), digest.size());
  SHA256_Final(digest.data(), &ctx);
  OPENSSL_cleanse(&ctx, sizeof(ctx));

  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::array<char, kMacChars> out{};
  size_t o = 0;
  size_t i = 0;
  for (; i + 3 <= kMacBytes; i += 3) {
    uint32_t v = (uint32_t{digest[i]} << 16) | (uint32_t{digest[i + 1]} << 8) | digest[i + 2];
    out[o++] = kAlphabet[(v >> 18) & 63];
    out[o++] = kAlphabet[(v >> 12) & 63];
    out[o++] = kAlphabet[(v >> 6) & 63];
    out[o++] = kAlphabet[v & 63];
  }
  // 16 = 5 * 3 + 1: one byte left, two characters.
  uint32_t v = uint32_t{digest[i]} << 16;
  out[o++] = kAlphabet[(v >> 18) & 63];
  out[o++] = kAlphabet[(v >> 12) & 63];
  return out;
}

// Whether two 22-character MACs are equal, in constant time like
// CRYPTO_memcmp (no branch on their bytes) but as three overlapping words
// instead of its byte loop (~160 instructions per sticky request).
bool MacsEqual(const char* a, const char* b) {
  using string_hash_internal::Read8;
  static_assert(kMacChars > 16 && kMacChars <= 24);
  const auto* x = reinterpret_cast<const unsigned char*>(a);
  const auto* y = reinterpret_cast<const unsigned char*>(b);
  const uint64_t differ = (Read8(x) ^ Read8(y)) | (Read8(x + 8) ^ Read8(y + 8)) |
                          (Read8(x + kMacChars - 8) ^ Read8(y + kMacChars - 8));
  return differ == 0;
}

}  // namespace

struct AffinityCookieCodec::HmacState {
  // Unique per key state (never 0): what a thread's MAC cache is keyed by.
  uint64_t generation;
  HmacPads pads;
  std::array<unsigned char, SHA256_DIGEST_LENGTH> key_digest;  // to notice an unchanged key
  bool has_previous = false;
  HmacPads previous;
  std::chrono::steady_clock::time_point previous_until;
};

namespace {

std::array<unsigned char, SHA256_DIGEST_LENGTH> KeyDigest(std::string_view key) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest.data());
  return digest;
}

uint64_t NextGeneration() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// The MAC of a (group, server) pair under a given key never changes, and a
// group has few servers: each thread keeps the MACs it computed in a small
// direct-mapped cache, so verifying a sticky request's cookie is a lookup
// and a constant-time compare instead of two SHA-256 blocks (~5,000
// instructions). Keyed by the key state's generation, so a rotated key
// never meets a MAC of the one it replaced. The cached values are what the
// cookies carry anyway. Allocated on a thread's first use (32 KiB), not in
// every thread's static TLS.
class MacCache {
 public:
  static constexpr size_t kSets = 32;
  static constexpr size_t kWays = 8;        // 256 entries of 128 bytes
  static constexpr size_t kTextBytes = 92;  // group key + server, longer is not cached

  // The cached MAC of (group_key, server) under `generation`, or nullptr.
  // `set` and `tag_out` receive where to store it.
  const std::array<char, kMacChars>* Find(uint64_t generation, std::string_view group_key,
                                          std::string_view server, size_t* set,
                                          uint32_t* tag_out) const {
    const uint64_t hash = HashString(server, HashString(group_key));
    *set = hash & (kSets - 1);
    const auto tag = static_cast<uint32_t>(hash >> 32);
    *tag_out = tag;
    for (const Entry& e : sets_[*set].ways) {
      if (e.tag == tag && e.generation == generation && e.group_size == group_key.size() &&
          e.server_size == server.size() &&
          BytesEqual(e.text, group_key.data(), group_key.size()) &&
          BytesEqual(e.text + group_key.size(), server.data(), server.size())) {
        return &e.mac;
      }
    }
    return nullptr;
  }

  // Replaces the set's ways in turn.
  void Store(size_t set, uint32_t tag, uint64_t generation, std::string_view group_key,
             std::string_view server, const std::array<char, kMacChars>& mac) {
    Set& s = sets_[set];
    Entry& e = s.ways[s.next];
    s.next = (s.next + 1) % kWays;
    e.generation = generation;
    e.tag = tag;
    e.group_size = static_cast<uint8_t>(group_key.size());
    e.server_size = static_cast<uint8_t>(server.size());
    std::memcpy(e.text, group_key.data(), group_key.size());
    std::memcpy(e.text + group_key.size(), server.data(), server.size());
    e.mac = mac;
  }

  static bool Fits(std::string_view group_key, std::string_view server) {
    return group_key.size() + server.size() <= kTextBytes;
  }

 private:
  struct Entry {
    uint64_t generation = 0;  // 0: empty
    uint32_t tag = 0;         // high hash bits, checked first
    uint8_t group_size = 0;
    uint8_t server_size = 0;
    char text[kTextBytes] = {};
    std::array<char, kMacChars> mac{};
  };
  struct Set {
    std::array<Entry, kWays> ways{};
    size_t next = 0;
  };
  std::array<Set, kSets> sets_{};
};

thread_local std::unique_ptr<MacCache> t_mac_cache;

}  // namespace

std::array<char, kMacChars> AffinityCookieCodec::CurrentMac(const HmacState& state,
                                                            std::string_view group_key,
                                                            std::string_view server) {
  if (!MacCache::Fits(group_key, server)) {
    return ComputeMac(state.pads, group_key, server);
  }
  MacCache* cache = t_mac_cache.get();
  if (cache == nullptr) {
    t_mac_cache = std::make_unique<MacCache>();
    cache = t_mac_cache.get();
  }
  size_t set = 0;
  uint32_t tag = 0;
  if (const auto* mac = cache->Find(state.generation, group_key, server, &set, &tag);
      mac != nullptr) {
    return *mac;
  }
  std::array<char, kMacChars> mac = ComputeMac(state.pads, group_key, server);
  cache->Store(set, tag, state.generation, group_key, server, mac);
  return mac;
}

AffinityCookieCodec::AffinityCookieCodec(std::string key)
    : hmac_(std::make_shared<const HmacState>(
          HmacState{NextGeneration(), PrecomputePads(key), KeyDigest(key), false, {}, {}})),
      generation_(hmac_.load()->generation) {
  OPENSSL_cleanse(key.data(), key.size());
}

AffinityCookieCodec::AffinityCookieCodec(const AffinityCookieCodec& other)
    : hmac_(other.hmac_.load()), generation_(hmac_.load()->generation) {}

const AffinityCookieCodec::HmacState& AffinityCookieCodec::ThisThreadState() const {
  // Generations are unique in the process, so a state of the same generation
  // is this codec's current one. Rotate stores hmac_ before generation_: a
  // thread that sees the new generation loads the new state; one that loads
  // a state newer than the generation it read refreshes it on its next call.
  thread_local std::shared_ptr<const HmacState> cached;
  uint64_t generation = generation_.load(std::memory_order_acquire);
  if (cached == nullptr || cached->generation != generation) {
    cached = hmac_.load();
  }
  return *cached;
}

void AffinityCookieCodec::Rotate(std::string_view key, std::chrono::milliseconds grace) {
  std::shared_ptr<const HmacState> old = hmac_.load();
  auto digest = KeyDigest(key);
  if (CRYPTO_memcmp(digest.data(), old->key_digest.data(), digest.size()) == 0) {
    return;
  }
  auto next = std::make_shared<HmacState>(
      HmacState{NextGeneration(), PrecomputePads(key), digest, false, {}, {}});
  if (grace.count() > 0) {
    next->has_previous = true;
    next->previous = old->pads;
    next->previous_until = std::chrono::steady_clock::now() + grace;
  }
  uint64_t generation = next->generation;
  hmac_.store(std::move(next));
  generation_.store(generation, std::memory_order_release);
}

std::string AffinityCookieCodec::Encode(std::string_view group_key, std::string_view server) const {
  const HmacState& state = ThisThreadState();
  std::array<char, kMacChars> mac = CurrentMac(state, group_key, server);
  std::string value;
  value.reserve(kMacChars + 1 + server.size());
  value.append(mac.data(), mac.size());
  value += '.';
  value.append(server);
  return value;
}

bool AffinityCookieCodec::Verify(std::string_view value, std::string_view group_key,
                                 std::string_view* server) const {
  if (value.size() < kMacChars + 2 || value[kMacChars] != '.') {
    return false;
  }
  std::string_view claimed_server = value.substr(kMacChars + 1);
  const HmacState& state = ThisThreadState();
  std::array<char, kMacChars> expected = CurrentMac(state, group_key, claimed_server);
  if (!MacsEqual(expected.data(), value.data())) {
    // A cookie signed before the last rotation, within the grace period.
    if (!state.has_previous || std::chrono::steady_clock::now() >= state.previous_until) {
      return false;
    }
    expected = ComputeMac(state.previous, group_key, claimed_server);
    if (!MacsEqual(expected.data(), value.data())) {
      return false;
    }
  }
  *server = claimed_server;
  return true;
}

namespace {

// RFC 6265 4.1.1: cookie-octet, and token for the name.
bool IsCookieOctet(char c) {
  return c > 0x20 && c < 0x7f && c != '"' && c != ',' && c != ';' && c != '\\';
}

bool IsTokenOctet(char c) {
  return IsCookieOctet(c) && std::string_view("()<>@:/[]?={}").find(c) == std::string_view::npos;
}

// Appends `text`, percent-encoding every byte `allowed` refuses.
template <typename Allowed>
void AppendCookieText(std::string_view text, Allowed allowed, std::string& out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (char c : text) {
    if (allowed(c)) {
      out += c;
    } else {
      auto byte = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
}

}  // namespace

std::string AffinityCookieCodec::SetCookieValue(std::string_view name, std::string_view value,
                                                bool secure) {
  // CheckSnapshot admits only cookie-safe server names and cookie names; a
  // header line must not depend on that alone.
  std::string out;
  out.reserve(name.size() + value.size() + 48);
  AppendCookieText(name, IsTokenOctet, out);
  out += '=';
  AppendCookieText(value, IsCookieOctet, out);
  out += "; Path=/; HttpOnly; SameSite=Lax";
  if (secure) {
    out += "; Secure";
  }
  return out;
}

}  // namespace kwd::session

#pragma GCC diagnostic pop
