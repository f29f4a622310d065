#include "dataplane/routing/secure_redirect.h"

#include <gtest/gtest.h>

#include <string>

namespace kwd::routing {
namespace {

std::string Location(std::string_view host, std::string_view target, uint16_t port = 443) {
  std::string out = "unchanged";
  if (!BuildSecureRedirectLocation(host, target, port, &out)) {
    EXPECT_TRUE(out.empty());
    return "refused";
  }
  return out;
}

TEST(SecureRedirectTest, HostWithoutItsPortAndTheHttpsPortUnless443) {
  EXPECT_EQ(Location("erp.example.com", "/sap/x"), "https://erp.example.com/sap/x");
  EXPECT_EQ(Location("erp.example.com:8080", "/sap/x"), "https://erp.example.com/sap/x");
  EXPECT_EQ(Location("erp.example.com:8080", "/sap/x", 8443), "https://erp.example.com:8443/sap/x");
  EXPECT_EQ(Location("erp.example.com.", "/"), "https://erp.example.com/");
  EXPECT_EQ(Location("10.1.2.3:80", "/a"), "https://10.1.2.3/a");
  EXPECT_EQ(Location("[2001:db8::1]:80", "/a", 9443), "https://[2001:db8::1]:9443/a");
  EXPECT_EQ(Location("[::ffff:10.0.0.1]", "/a"), "https://[::ffff:10.0.0.1]/a");
  EXPECT_EQ(Location("erp-01_x.example", "/a"), "https://erp-01_x.example/a");
  EXPECT_EQ(Location("erp.example.com", "/a", 0), "refused");  // no https port at all
}

TEST(SecureRedirectTest, TargetGoesAsReceived) {
  // Percent-encoding is never decoded nor normalised; dot segments stay.
  EXPECT_EQ(Location("h", "/sap/bc/gui/%2e%2E/x%2Fy;p=1?a=%41%2f&b=c+d"),
            "https://h/sap/bc/gui/%2e%2E/x%2Fy;p=1?a=%41%2f&b=c+d");
  EXPECT_EQ(Location("h", "/a/../b//c"), "https://h/a/../b//c");
  EXPECT_EQ(Location("h", "?q=1"), "https://h/?q=1");  // "http://h?q=1"
  EXPECT_EQ(Location("h", "/a#frag"), "https://h/a");
  // Bytes a URL cannot carry as they are get encoded (a header stays one line).
  EXPECT_EQ(Location("h", std::string_view("/a b\r\n\x7f\xc3\xa9\\\"<>", 13)),
            "https://h/a%20b%0D%0A%7F%C3%A9%5C%22%3C%3E");
  EXPECT_EQ(Location("h", std::string_view("/a\0b", 4)), "https://h/a%00b");
  EXPECT_EQ(Location("h", "*"), "refused");
  EXPECT_EQ(Location("h", "erp.example.com:443"), "refused");
  EXPECT_EQ(Location("h", ""), "refused");
  EXPECT_EQ(Location("h", "//evil.example/x"), "https://h//evil.example/x");  // a path, on h
}

// No Host can make the Location name another site or break the header.
TEST(SecureRedirectTest, HostileHostsAreRefused) {
  for (std::string_view host :
       {"", ":80", "evil.example@erp.example.com", "user:pw@erp.example.com", "evil.example/x",
        "evil.example\\x", "evil.example%2F", "a%2eb", "erp.example.com:80:80",
        "erp.example.com:x", "erp.example.com:123456", "erp\r\nSet-Cookie: a=b", "erp\nx", "a b",
        "erp.example.com;x", "erp.example.com,evil", "erp?x", "erp#x", "[::1", "[::1%25eth0]",
        "[::1]x", "[]", "[zz::1]", "[1.2.3.4]", ".evil", "-evil", "erp..example", "\xc3\xa9.com",
        "erp.example.com\t", "erp.example.com "}) {
    EXPECT_EQ(Location(host, "/a"), "refused") << host;
  }
  std::string long_name(254, 'a');
  EXPECT_EQ(Location(long_name, "/a"), "refused");
  EXPECT_EQ(Location(std::string(253, 'a'), "/a"), "https://" + std::string(253, 'a') + "/a");
}

TEST(SecureRedirectTest, StatusKeepsMethodAndBodyExceptForGetAndHead) {
  EXPECT_EQ(SecureRedirectStatus("GET"), 301);
  EXPECT_EQ(SecureRedirectStatus("HEAD"), 301);
  for (std::string_view method : {"POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND"}) {
    EXPECT_EQ(SecureRedirectStatus(method), 308) << method;
  }
}

}  // namespace
}  // namespace kwd::routing
