#include "dataplane/session/client_ip_table.h"

#include <gtest/gtest.h>

#include <string>

namespace kwd::session {
namespace {

TEST(ClientIpTableTest, MaskedAddressesShareAnEntry) {
  ClientIpTable table(ClientIpTableOptions{});  // 255.255.240.0
  table.Record("10.1.16.5", "s1", 0);
  EXPECT_EQ(table.Lookup("10.1.31.200", 1), "s1");       // same /20
  EXPECT_EQ(table.Lookup("10.1.32.1", 1), "");           // next /20
  EXPECT_EQ(table.Lookup("::ffff:10.1.20.1", 1), "s1");  // mapped IPv4 masks alike
  table.Record("2001:db8:1:2::5", "s2", 0);
  EXPECT_EQ(table.Lookup("2001:db8:1:2:ffff::1", 1), "s2");  // same /64
  EXPECT_EQ(table.Lookup("2001:db8:1:3::5", 1), "");
  EXPECT_EQ(table.Lookup("not an address", 1), "");
}

TEST(ClientIpTableTest, ExpiresWhenIdleAndRefreshesOnUse) {
  ClientIpTableOptions options;
  options.idle_timeout_ms = 1000;
  ClientIpTable table(options);
  table.Record("192.0.2.1", "s1", 0);
  EXPECT_EQ(table.Lookup("192.0.2.1", 900), "s1");   // refreshed at 900
  EXPECT_EQ(table.Lookup("192.0.2.1", 1800), "s1");  // 900 ms after use
  EXPECT_EQ(table.Lookup("192.0.2.1", 2800), "");    // idle 1000 ms: gone
  EXPECT_EQ(table.size(), 0u);
}

TEST(ClientIpTableTest, BoundedLeastRecentlyUsedEvicted) {
  ClientIpTableOptions options;
  options.ipv4_mask = 0xFFFFFFFF;
  options.max_entries = 3;
  ClientIpTable table(options);
  for (int i = 0; i < 10; ++i) {
    table.Record("192.0.2." + std::to_string(i), "s", i);
  }
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.evictions(), 7u);
  EXPECT_EQ(table.Lookup("192.0.2.9", 11), "s");
  EXPECT_EQ(table.Lookup("192.0.2.0", 11), "");
  table.Erase("192.0.2.9");
  EXPECT_EQ(table.Lookup("192.0.2.9", 11), "");
}

TEST(ClientIpTableTest, ANewMaskStartsEmpty) {
  ClientIpTable table(ClientIpTableOptions{});
  table.Record("10.0.0.1", "s1", 0);
  ClientIpTableOptions narrower;
  narrower.ipv4_mask = 0xFFFFFF00;
  table.Reconfigure(narrower);
  EXPECT_EQ(table.Lookup("10.0.0.1", 1), "");
}

}  // namespace
}  // namespace kwd::session
