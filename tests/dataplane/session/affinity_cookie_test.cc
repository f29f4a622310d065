#include "dataplane/session/affinity_cookie.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "tests/dataplane/session/alloc_counter.h"

namespace kwd::session {
namespace {

constexpr char kKey[] = "shared-secret-of-every-proxy-replica";

// The documented format, computed with the common (one-shot) HMAC.
std::string ExpectedValue(std::string_view key, std::string_view group, std::string_view server) {
  std::string message = std::string(group) + "\n" + std::string(server);
  Sha256Digest mac = HmacSha256(key, message);
  return Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(mac.data()), 16)) + "." +
         std::string(server);
}

TEST(AffinityCookieTest, EncodesDocumentedFormat) {
  AffinityCookieCodec codec(kKey);
  std::string value = codec.Encode("erp/public", "erp1_ERP_00");
  ASSERT_EQ(value.size(), 22u + 1u + 11u);
  EXPECT_EQ(value[22], '.');
  EXPECT_EQ(value, ExpectedValue(kKey, "erp/public", "erp1_ERP_00"));
}

TEST(AffinityCookieTest, KeysOfEveryLengthMatchStandardHmac) {
  // Keys longer than the SHA-256 block are hashed first (RFC 2104).
  for (size_t length : {0u, 1u, 32u, 63u, 64u, 65u, 200u}) {
    std::string key(length, 'k');
    AffinityCookieCodec codec(key);
    EXPECT_EQ(codec.Encode("g", "s"), ExpectedValue(key, "g", "s")) << length;
  }
}

TEST(AffinityCookieTest, VerifyRoundTrip) {
  AffinityCookieCodec codec(kKey);
  std::string value = codec.Encode("erp/public", "pod-7f9c");
  std::string_view server;
  ASSERT_TRUE(codec.Verify(value, "erp/public", &server));
  EXPECT_EQ(server, "pod-7f9c");
  EXPECT_EQ(server.data(), value.data() + 23);  // points into the value

  // Another replica with the same key accepts it too.
  AffinityCookieCodec replica(kKey);
  EXPECT_TRUE(replica.Verify(value, "erp/public", &server));
  AffinityCookieCodec copy = codec;
  EXPECT_TRUE(copy.Verify(value, "erp/public", &server));
}

TEST(AffinityCookieTest, RejectsTamperingAndMalformedValues) {
  AffinityCookieCodec codec(kKey);
  const std::string good = codec.Encode("erp/public", "server1");
  std::string flipped_mac = good;
  flipped_mac[3] = flipped_mac[3] == 'A' ? 'B' : 'A';
  std::string flipped_last_mac_char = good;
  flipped_last_mac_char[21] = flipped_last_mac_char[21] == 'A' ? 'B' : 'A';
  std::string other_server = good.substr(0, 23) + "server2";
  std::string no_dot = good;
  no_dot[22] = '_';
  const std::string cases[] = {
      flipped_mac,
      flipped_last_mac_char,
      other_server,
      no_dot,
      good.substr(0, 23),  // empty server
      good.substr(0, 22),
      good.substr(1),
      "",
      ".server1",
      "x" + good,
      good + "x",
  };
  for (const std::string& value : cases) {
    std::string_view server = "untouched";
    EXPECT_FALSE(codec.Verify(value, "erp/public", &server)) << value;
    EXPECT_EQ(server, "untouched") << value;
  }
}

// The MAC is compared a word at a time: a change at any of its 22
// characters, to any other character of its alphabet, is refused.
TEST(AffinityCookieTest, RejectsAChangeAtEveryMacCharacter) {
  AffinityCookieCodec codec(kKey);
  const std::string good = codec.Encode("erp/public", "server1");
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string_view server;
  ASSERT_TRUE(codec.Verify(good, "erp/public", &server));
  for (size_t at = 0; at < 22; ++at) {
    for (char c : alphabet) {
      if (c == good[at]) {
        continue;
      }
      std::string changed = good;
      changed[at] = c;
      ASSERT_FALSE(codec.Verify(changed, "erp/public", &server)) << changed;
    }
  }
}

TEST(AffinityCookieTest, RejectsWrongGroupAndWrongKey) {
  AffinityCookieCodec codec(kKey);
  std::string value = codec.Encode("erp/public", "server1");
  std::string_view server;
  EXPECT_FALSE(codec.Verify(value, "erp/portal", &server));
  EXPECT_FALSE(codec.Verify(value, "", &server));
  // The "\n" separator keeps group and server apart.
  EXPECT_FALSE(codec.Verify(codec.Encode("erp/publi", "c\nserver1"), "erp/public", &server));
  AffinityCookieCodec other(std::string("another-key"));
  EXPECT_FALSE(other.Verify(value, "erp/public", &server));
}

TEST(AffinityCookieTest, VerifyDoesNotAllocate) {
  AffinityCookieCodec codec(kKey);
  std::string good = codec.Encode("erp/public", "erp1_ERP_00");
  std::string bad = good;
  bad[0] = bad[0] == 'A' ? 'B' : 'A';
  std::string_view server;
  int accepted = 0;
  testing::AllocScope scope;
  for (int i = 0; i < 1000; ++i) {
    accepted += codec.Verify(good, "erp/public", &server);
    accepted += codec.Verify(bad, "erp/public", &server);
  }
  EXPECT_EQ(scope.Delta().count, 0u);
  EXPECT_EQ(accepted, 1000);
}

// Verify keeps each thread's recent (group, server) MACs: what it computes
// from the cache must be what the key says, for more pairs than it holds,
// names too long to cache, and after the key changes.
TEST(AffinityCookieTest, CachedMacsMatchTheKeyForManyPairsAndRotation) {
  AffinityCookieCodec codec(kKey);
  AffinityCookieCodec other_key(std::string("another-key"));
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int g = 0; g < 20; ++g) {
    for (int s = 0; s < 30; ++s) {  // 600 pairs: more than the cache holds
      pairs.emplace_back("ns/g" + std::to_string(g), "srv_" + std::to_string(s));
    }
  }
  pairs.emplace_back("ns/long", std::string(120, 'x'));  // never cached
  for (int round = 0; round < 3; ++round) {
    for (const auto& [group, server] : pairs) {
      const std::string expected = ExpectedValue(kKey, group, server);
      ASSERT_EQ(codec.Encode(group, server), expected) << group << " " << server;
      std::string_view verified;
      ASSERT_TRUE(codec.Verify(expected, group, &verified)) << group << " " << server;
      EXPECT_EQ(verified, server);
      // The same pair under another key, and a near miss of a cached pair.
      EXPECT_FALSE(other_key.Verify(expected, group, &verified));
      std::string tampered = expected;
      tampered[5] = tampered[5] == 'A' ? 'B' : 'A';
      EXPECT_FALSE(codec.Verify(tampered, group, &verified));
      EXPECT_FALSE(codec.Verify(expected, group + "x", &verified));
    }
  }
  // A rotated key does not accept what the cache held for the old one.
  const std::string old_value = codec.Encode("ns/g1", "srv_1");
  std::string_view verified;
  ASSERT_TRUE(codec.Verify(old_value, "ns/g1", &verified));
  codec.Rotate("rotated-key", std::chrono::milliseconds(0));
  EXPECT_FALSE(codec.Verify(old_value, "ns/g1", &verified));
  EXPECT_EQ(codec.Encode("ns/g1", "srv_1"), ExpectedValue("rotated-key", "ns/g1", "srv_1"));
  // Another thread has its own cache and reaches the same answers.
  bool thread_ok = false;
  std::thread t([&] {
    std::string_view v;
    thread_ok = codec.Verify(ExpectedValue("rotated-key", "ns/g2", "srv_3"), "ns/g2", &v) &&
                v == "srv_3" && !codec.Verify(old_value, "ns/g1", &v);
  });
  t.join();
  EXPECT_TRUE(thread_ok);
}

TEST(AffinityCookieTest, SetCookieValue) {
  EXPECT_EQ(AffinityCookieCodec::SetCookieValue("kwd_affinity", "abc.s1", false),
            "kwd_affinity=abc.s1; Path=/; HttpOnly; SameSite=Lax");
  EXPECT_EQ(AffinityCookieCodec::SetCookieValue("kwd_affinity", "abc.s1", true),
            "kwd_affinity=abc.s1; Path=/; HttpOnly; SameSite=Lax; Secure");
}

// The snapshot check keeps such names out; should one get through, the
// header still holds one cookie: what a cookie name or value may not hold is
// percent-encoded (the value then no longer verifies: the cookie is ignored).
TEST(AffinityCookieTest, SetCookieValueNeverCarriesWhatACookieMayNotHold) {
  AffinityCookieCodec codec("k");
  std::string value = codec.Encode("erp/public", "A\r\nSet-Cookie: evil=1; Domain=x\"\\,\x7f\xff");
  std::string header = AffinityCookieCodec::SetCookieValue("kwd affinity\r\n", value, false);
  EXPECT_EQ(header.substr(header.find('.')),
            ".A%0D%0ASet-Cookie:%20evil=1%3B%20Domain=x%22%5C%2C%7F%FF; Path=/; HttpOnly; "
            "SameSite=Lax");
  EXPECT_EQ(header.rfind("kwd%20affinity%0D%0A=", 0), 0u) << header;
  std::string_view server;
  std::string_view sent = std::string_view(header).substr(header.find('=') + 1);
  sent = sent.substr(0, sent.find(';'));
  EXPECT_FALSE(codec.Verify(sent, "erp/public", &server));
  // Names a snapshot may hold pass unchanged.
  EXPECT_EQ(AffinityCookieCodec::SetCookieValue("kwd_affinity", "m.erp1_ERP_00:fd00::1", false),
            "kwd_affinity=m.erp1_ERP_00:fd00::1; Path=/; HttpOnly; SameSite=Lax");
}

TEST(AffinityCookieRotationTest, SignsWithTheNewKeyAndAcceptsThePreviousWithinGrace) {
  AffinityCookieCodec codec("key-A");
  std::string old_value = codec.Encode("erp/public", "s1");
  codec.Rotate("key-B", std::chrono::hours(1));
  EXPECT_EQ(codec.Encode("erp/public", "s1"), ExpectedValue("key-B", "erp/public", "s1"));
  std::string_view server;
  EXPECT_TRUE(codec.Verify(old_value, "erp/public", &server));
  EXPECT_EQ(server, "s1");
  EXPECT_TRUE(codec.Verify(codec.Encode("erp/public", "s2"), "erp/public", &server));
  EXPECT_EQ(server, "s2");
  // Only the one previous key: after a second rotation key A is gone.
  codec.Rotate("key-C", std::chrono::hours(1));
  EXPECT_FALSE(codec.Verify(old_value, "erp/public", &server));
  EXPECT_TRUE(codec.Verify(ExpectedValue("key-B", "erp/public", "s1"), "erp/public", &server));
}

TEST(AffinityCookieRotationTest, GraceZeroDropsThePreviousKeyAndTheSameKeyChangesNothing) {
  AffinityCookieCodec codec("key-A");
  std::string old_value = codec.Encode("erp/public", "s1");
  std::string_view server;
  codec.Rotate("key-A", std::chrono::milliseconds(0));
  EXPECT_TRUE(codec.Verify(old_value, "erp/public", &server));
  codec.Rotate("key-B", std::chrono::milliseconds(0));
  EXPECT_FALSE(codec.Verify(old_value, "erp/public", &server));
  // Rotating to the current key again keeps the previous one's grace.
  AffinityCookieCodec graced("key-A");
  graced.Rotate("key-B", std::chrono::hours(1));
  graced.Rotate("key-B", std::chrono::milliseconds(0));
  EXPECT_TRUE(graced.Verify(old_value, "erp/public", &server));
}

// Each thread keeps its own copy of the key state (no shared reference count
// per request): a rotation made on another thread still takes effect at once.
TEST(AffinityCookieRotationTest, ARotationOnAnotherThreadTakesEffectOnThisOne) {
  AffinityCookieCodec codec("key-A");
  std::string old_value = codec.Encode("erp/public", "s1");
  std::string_view server;
  ASSERT_TRUE(codec.Verify(old_value, "erp/public", &server));  // this thread holds key A
  std::thread([&] { codec.Rotate("key-B", std::chrono::milliseconds(0)); }).join();
  EXPECT_FALSE(codec.Verify(old_value, "erp/public", &server));
  EXPECT_TRUE(codec.Verify(ExpectedValue("key-B", "erp/public", "s1"), "erp/public", &server));
  EXPECT_EQ(codec.Encode("erp/public", "s2"), ExpectedValue("key-B", "erp/public", "s2"));
}

// Two codecs used in turn on one thread each answer with their own key.
TEST(AffinityCookieRotationTest, CodecsWithOtherKeysUsedInTurnKeepTheirOwnKeys) {
  AffinityCookieCodec a("key-A");
  AffinityCookieCodec b("key-B");
  AffinityCookieCodec copy_of_a(a);
  std::string_view server;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.Encode("g", "s1"), ExpectedValue("key-A", "g", "s1"));
    EXPECT_FALSE(b.Verify(ExpectedValue("key-A", "g", "s1"), "g", &server));
    EXPECT_TRUE(copy_of_a.Verify(ExpectedValue("key-A", "g", "s1"), "g", &server));
    EXPECT_EQ(b.Encode("g", "s1"), ExpectedValue("key-B", "g", "s1"));
    EXPECT_FALSE(a.Verify(ExpectedValue("key-B", "g", "s1"), "g", &server));
  }
  a.Rotate("key-C", std::chrono::milliseconds(0));  // the copy keeps key A
  EXPECT_TRUE(copy_of_a.Verify(ExpectedValue("key-A", "g", "s1"), "g", &server));
  EXPECT_FALSE(a.Verify(ExpectedValue("key-A", "g", "s1"), "g", &server));
}

TEST(AffinityCookieRotationTest, VerifyWithThePreviousKeyDoesNotAllocate) {
  AffinityCookieCodec codec("key-A");
  std::string old_value = codec.Encode("erp/public", "s1");
  codec.Rotate("key-B", std::chrono::hours(1));
  std::string_view server;
  testing::AllocScope scope;
  bool verified = codec.Verify(old_value, "erp/public", &server);
  EXPECT_EQ(scope.Delta().count, 0u);
  EXPECT_TRUE(verified);
}

}  // namespace
}  // namespace kwd::session
