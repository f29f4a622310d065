#include "dataplane/net/proxy_protocol.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "dataplane/net/cidr.h"

namespace kwd::net {
namespace {

std::string V2(uint8_t command, uint8_t family, const std::string& addresses) {
  std::string out("\r\n\r\n\0\r\nQUIT\n", 12);
  out.push_back(static_cast<char>(0x20 | command));
  out.push_back(static_cast<char>(family));
  out.push_back(static_cast<char>(addresses.size() >> 8));
  out.push_back(static_cast<char>(addresses.size() & 0xFF));
  return out + addresses;
}

std::string V4Addresses(const char* source, uint16_t port) {
  std::string out(12, '\0');
  inet_pton(AF_INET, source, out.data());
  inet_pton(AF_INET, "127.0.0.1", out.data() + 4);
  out[8] = static_cast<char>(port >> 8);
  out[9] = static_cast<char>(port & 0xFF);
  return out;
}

TEST(ProxyProtocolTest, V1Tcp4AndTcp6) {
  ProxyHeader h;
  std::string error;
  std::string line = "PROXY TCP4 192.0.2.1 10.0.0.1 56324 443\r\nGET";
  ASSERT_EQ(ParseProxyHeader(line, &h, &error), ProxyHeaderStatus::kDone) << error;
  EXPECT_EQ(h.version, 1);
  EXPECT_EQ(h.source_address, "192.0.2.1");
  EXPECT_EQ(h.source_port, 56324);
  EXPECT_EQ(h.length, line.size() - 3);
  ASSERT_EQ(ParseProxyHeader("PROXY TCP6 2001:db8::1 ::1 1 2\r\n", &h, &error),
            ProxyHeaderStatus::kDone);
  EXPECT_EQ(h.source_address, "2001:db8::1");
  ASSERT_EQ(ParseProxyHeader("PROXY UNKNOWN\r\n", &h, &error), ProxyHeaderStatus::kDone);
  EXPECT_TRUE(h.local);
}

TEST(ProxyProtocolTest, V1PrefixesNeedMoreAndBadLinesAreRefused) {
  ProxyHeader h;
  std::string error;
  EXPECT_EQ(ParseProxyHeader("PRO", &h, &error), ProxyHeaderStatus::kNeedMore);
  EXPECT_EQ(ParseProxyHeader("PROXY TCP4 1.2.3", &h, &error), ProxyHeaderStatus::kNeedMore);
  EXPECT_EQ(ParseProxyHeader("GET / HTTP/1.1\r\n", &h, &error), ProxyHeaderStatus::kInvalid);
  EXPECT_EQ(ParseProxyHeader("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", &h, &error),
            ProxyHeaderStatus::kInvalid);
  EXPECT_EQ(ParseProxyHeader("PROXY TCP4 1.2.3.04 5.6.7.8 1 2\r\n", &h, &error),
            ProxyHeaderStatus::kInvalid);
  EXPECT_EQ(ParseProxyHeader("PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", &h, &error),
            ProxyHeaderStatus::kInvalid);
  EXPECT_EQ(ParseProxyHeader("PROXY TCP4 ::1 ::1 1 2\r\n", &h, &error),
            ProxyHeaderStatus::kInvalid);
  EXPECT_EQ(ParseProxyHeader("PROXY TCP4 1.2.3.4\x01", &h, &error), ProxyHeaderStatus::kInvalid);
  EXPECT_EQ(ParseProxyHeader("PROXY " + std::string(120, '1'), &h, &error),
            ProxyHeaderStatus::kInvalid);
}

TEST(ProxyProtocolTest, V2ProxyLocalAndBad) {
  ProxyHeader h;
  std::string error;
  std::string v4 = V2(1, 0x11, V4Addresses("198.51.100.7", 4242));
  ASSERT_EQ(ParseProxyHeader(v4 + "tail", &h, &error), ProxyHeaderStatus::kDone) << error;
  EXPECT_EQ(h.version, 2);
  EXPECT_EQ(h.source_address, "198.51.100.7");
  EXPECT_EQ(h.source_port, 4242);
  EXPECT_EQ(h.length, v4.size());
  for (size_t n = 0; n < v4.size(); ++n) {
    EXPECT_EQ(ParseProxyHeader(v4.substr(0, n), &h, &error), ProxyHeaderStatus::kNeedMore) << n;
  }
  ASSERT_EQ(ParseProxyHeader(V2(0, 0x00, ""), &h, &error), ProxyHeaderStatus::kDone);
  EXPECT_TRUE(h.local);
  EXPECT_EQ(ParseProxyHeader(V2(1, 0x12, V4Addresses("1.2.3.4", 1)), &h, &error),
            ProxyHeaderStatus::kInvalid);  // UDP
  EXPECT_EQ(ParseProxyHeader(V2(1, 0x11, "short"), &h, &error), ProxyHeaderStatus::kInvalid);
  EXPECT_EQ(ParseProxyHeader(V2(2, 0x11, V4Addresses("1.2.3.4", 1)), &h, &error),
            ProxyHeaderStatus::kInvalid);
  std::string huge = V2(1, 0x11, V4Addresses("1.2.3.4", 1) + std::string(2000, 'x'));
  EXPECT_EQ(ParseProxyHeader(huge, &h, &error), ProxyHeaderStatus::kInvalid);
}

TEST(ProxyProtocolTest, ReadConsumesExactlyTheHeader) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  ProxyHeader h;
  std::string error;
  EXPECT_EQ(ReadProxyHeader(fds[0], &h, &error), ProxyReadStatus::kNeedMore);
  std::string data = "PROXY TCP4 192.0.2.9 10.0.0.1 1 2\r\n\x16\x03";
  ASSERT_EQ(write(fds[1], data.data(), 20), 20);
  EXPECT_EQ(ReadProxyHeader(fds[0], &h, &error), ProxyReadStatus::kNeedMore);
  ASSERT_EQ(write(fds[1], data.data() + 20, data.size() - 20),
            static_cast<ssize_t>(data.size() - 20));
  ASSERT_EQ(ReadProxyHeader(fds[0], &h, &error), ProxyReadStatus::kDone) << error;
  EXPECT_EQ(h.source_address, "192.0.2.9");
  char rest[8];
  ASSERT_EQ(read(fds[0], rest, sizeof rest), 2);
  EXPECT_EQ(std::string(rest, 2), "\x16\x03");
  close(fds[1]);
  EXPECT_EQ(ReadProxyHeader(fds[0], &h, &error), ProxyReadStatus::kClosed);
  close(fds[0]);
}

TEST(CidrSetTest, MatchesRangesAndMappedAddresses) {
  CidrSet set;
  std::string error;
  ASSERT_TRUE(set.Parse("10.0.0.0/8, 192.168.1.1,2001:db8::/32", &error)) << error;
  EXPECT_TRUE(set.Contains("10.255.0.1"));
  EXPECT_TRUE(set.Contains("::ffff:10.1.2.3"));
  EXPECT_TRUE(set.Contains("192.168.1.1"));
  EXPECT_FALSE(set.Contains("192.168.1.2"));
  EXPECT_TRUE(set.Contains("2001:db8:1::5"));
  EXPECT_FALSE(set.Contains("2001:db9::5"));
  EXPECT_FALSE(set.Contains("not-an-address"));
  CidrSet bad;
  EXPECT_FALSE(bad.Parse("10.0.0.0/33", &error));
  EXPECT_NE(error.find("10.0.0.0/33"), std::string::npos);
  EXPECT_FALSE(bad.Parse("example.com", &error));
  EXPECT_FALSE(bad.Parse("10.0.0.0/x", &error));
}

TEST(CidrSetTest, MappedRangeInIpv6NotationTakesAnIpv6PrefixLength) {
  // "::ffff:10.0.0.0/104" is 10.0.0.0/8 written the IPv6 way: its prefix
  // length counts 128 bits, not 32.
  CidrSet set;
  std::string error;
  ASSERT_TRUE(set.Parse("::ffff:10.0.0.0/104", &error)) << error;
  EXPECT_TRUE(set.Contains("10.9.8.7"));
  EXPECT_TRUE(set.Contains("::ffff:10.1.2.3"));
  EXPECT_FALSE(set.Contains("11.0.0.1"));
  CidrSet all_v4;
  ASSERT_TRUE(all_v4.Parse("::ffff:0.0.0.0/96", &error)) << error;
  EXPECT_TRUE(all_v4.Contains("203.0.113.9"));
  EXPECT_FALSE(all_v4.Contains("2001:db8::1"));
  // Not a narrower IPv4 range by accident: /8 of the 128 bits is ::/8.
  CidrSet wide;
  ASSERT_TRUE(wide.Parse("::ffff:10.0.0.0/8", &error)) << error;
  EXPECT_TRUE(wide.Contains("10.1.1.1"));
  EXPECT_TRUE(wide.Contains("11.1.1.1"));
  CidrSet bad;
  EXPECT_FALSE(bad.Parse("::ffff:10.0.0.0/129", &error));
  EXPECT_NE(error.find("above 128"), std::string::npos) << error;
}

}  // namespace
}  // namespace kwd::net
