// The server list and group information parsers and BuildInstances: table
// tests over the captured shape (reference section 3.2), layout variants and
// bad input.

#include "controller/sapsystem/server_list.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "controller/sapsystem/spec.h"

namespace kwd::sapsystem {
namespace {

// The captured kernel-793 answer (host sanitised), LF as stored.
constexpr std::string_view kCaptured =
    "version 1.2\n"
    "vhcala4hci_A4H_00\n"
    "DIAG\tvhcala4hci\t3200\tLB=7\n"
    "DIAGS\tvhcala4hci\t3200\tp:CN=A4H, OU=I0000000000, OU=SAP Web AS, O=SAP Trust Community, "
    "C=DE\n"
    "RFC\tvhcala4hci\t3300\t\n"
    "RFCS\tvhcala4hci\t4800\tp:CN=A4H, OU=I0000000000, OU=SAP Web AS, O=SAP Trust Community, "
    "C=DE\n"
    "HTTP\tvhcala4hci\t50000\t\n"
    "HTTPS\tvhcala4hci\t50001\t\n"
    "HTTP\tvhcala4hci\t50000\tVHOST=0\n"
    "HTTPS\tvhcala4hci\t50001\tVHOST=0\n"
    "\n";

Resolver Table(std::map<std::string, std::vector<std::string>> table) {
  return [table](const std::string& host) {
    auto it = table.find(host);
    return it == table.end() ? std::vector<std::string>{} : it->second;
  };
}

std::vector<model::SapInstance> Build(std::string_view body, Skips* skips,
                                      const std::vector<model::SapInstance>* previous = nullptr,
                                      const AddressPolicy& policy = {}) {
  ParsedServerList parsed = ParseServerList(body);
  EXPECT_TRUE(parsed.ok) << parsed.error;
  *skips = parsed.skips;
  return BuildInstances(parsed,
                        Table({{"vhcala4hci", {"10.0.0.5"}},
                               {"appa", {"10.0.0.1", "fd00::1"}},
                               {"appb", {"10.0.0.2"}},
                               {"127.0.0.1", {"127.0.0.1"}},
                               {"localhost", {"127.0.0.1", "::1"}},
                               {"metadata", {"169.254.169.254"}},
                               {"twofaced", {"127.0.0.1", "10.0.0.7"}},
                               {"mapped", {"::ffff:127.0.0.1"}},
                               {"me", {"10.0.0.9"}}}),
                        &policy, previous, skips);
}

TEST(ServerListTest, CapturedShape) {
  ParsedServerList parsed = ParseServerList(kCaptured);
  ASSERT_TRUE(parsed.ok) << parsed.error;
  EXPECT_EQ(parsed.major, 1);
  EXPECT_EQ(parsed.minor, 2);
  ASSERT_EQ(parsed.instances.size(), 1u);
  EXPECT_EQ(parsed.instances[0].name, "vhcala4hci_A4H_00");
  ASSERT_EQ(parsed.instances[0].rows.size(), 8u);
  EXPECT_EQ(parsed.instances[0].rows[1].description,
            "p:CN=A4H, OU=I0000000000, OU=SAP Web AS, O=SAP Trust Community, C=DE");
  EXPECT_EQ(parsed.skips.total(), 0u);

  Skips skips;
  auto instances = Build(kCaptured, &skips);
  ASSERT_EQ(instances.size(), 1u);
  EXPECT_EQ(instances[0].name, "vhcala4hci_A4H_00");
  EXPECT_EQ(instances[0].host, "vhcala4hci");
  EXPECT_EQ(instances[0].address, "10.0.0.5");
  EXPECT_EQ(instances[0].http_port, 50000u);
  EXPECT_EQ(instances[0].https_port, 50001u);
  EXPECT_EQ(instances[0].capacity, 7u);
  EXPECT_TRUE(instances[0].abap);
  EXPECT_FALSE(instances[0].java);
}

// The reference's constructed two-record example, in every layout variant.
TEST(ServerListTest, LayoutVariantsGiveTheSameList) {
  const std::string records[][5] = {
      {"appa_PRD_00", "DIAG appa 3200 LB=10", "RFC appa 3300 ", "HTTP appa 8000 ",
       "HTTPS appa 44300 "},
      {"appb_PRD_01", "DIAG appb 3201 LB=4", "HTTP appb 8001 ", "", ""},
  };
  struct Variant {
    std::string name;
    std::string eol;
    bool tabs;
    bool blank_between;
    std::string version;
  };
  const Variant variants[] = {
      {"crlf tabs blank", "\r\n", true, true, "version 1.2"},
      {"lf tabs blank", "\n", true, true, "version 1.2"},
      {"crlf spaces blank", "\r\n", false, true, "version 1.2"},
      {"lf spaces, no blank line between records", "\n", false, false, "version1.2"},
      {"crlf tabs, no blank, tab in version", "\r\n", true, false, "version\t1.2"},
  };
  for (const Variant& v : variants) {
    std::string body = v.version + v.eol;
    for (const auto& record : records) {
      for (const std::string& line : record) {
        if (line.empty()) {
          continue;
        }
        std::string text = line;
        if (v.tabs) {
          for (char& c : text) {
            c = c == ' ' ? '\t' : c;
          }
        } else {
          // Runs of spaces are one separator.
          std::string wide;
          for (char c : text) {
            wide += c == ' ' ? std::string("   ") : std::string(1, c);
          }
          text = wide;
        }
        body += text + v.eol;
      }
      if (v.blank_between) {
        body += v.eol;
      }
    }
    Skips skips;
    auto instances = Build(body, &skips);
    ASSERT_EQ(instances.size(), 2u) << v.name;
    EXPECT_EQ(skips.total(), 0u) << v.name << ": " << skips.Summary();
    EXPECT_EQ(instances[0].name, "appa_PRD_00") << v.name;
    EXPECT_EQ(instances[0].address, "10.0.0.1") << v.name << " (IPv4 first)";
    EXPECT_EQ(instances[0].http_port, 8000u) << v.name;
    EXPECT_EQ(instances[0].https_port, 44300u) << v.name;
    EXPECT_EQ(instances[0].capacity, 10u) << v.name;
    EXPECT_EQ(instances[1].name, "appb_PRD_01") << v.name;
    EXPECT_EQ(instances[1].http_port, 8001u) << v.name;
    EXPECT_EQ(instances[1].https_port, 0u) << v.name;
    EXPECT_EQ(instances[1].capacity, 4u) << v.name;
  }
}

TEST(ServerListTest, EmptyDescriptionUnknownRowsAndJava) {
  Skips skips;
  auto instances = Build(
      "version 1.2\n"
      "j1_PRD_10\n"
      "P4\tappa\t50004\tLB=3\n"
      "TELNET\tappa\t50008\n"
      "SMTP\tappa\t25\tsomething new\n"
      "HTTP\tappa\t50000\n"  // no trailing TAB: empty description
      "\n"
      "bare_PRD_11\n"
      "HTTP\tappb\t8000\t\n",
      &skips);
  ASSERT_EQ(instances.size(), 2u);
  EXPECT_EQ(skips.total(), 0u) << skips.Summary();
  EXPECT_EQ(instances[0].name, "bare_PRD_11");
  EXPECT_FALSE(instances[0].abap);
  EXPECT_FALSE(instances[0].java);
  EXPECT_EQ(instances[0].capacity, 0u);  // not given: the LogonGroup's defaultCapacity
  EXPECT_EQ(instances[1].name, "j1_PRD_10");
  EXPECT_TRUE(instances[1].java);
  EXPECT_FALSE(instances[1].abap);
  EXPECT_EQ(instances[1].capacity, 3u);
  EXPECT_EQ(instances[1].http_port, 50000u);
}

TEST(ServerListTest, PrefersTheRowWithoutVhost) {
  Skips skips;
  auto instances = Build(
      "version 1.2\na_X_00\nHTTP\tappa\t9000\tVHOST=1\nHTTP\tappa\t8000\t\n"
      "HTTP\tappa\t8000\tVHOST=0\n",
      &skips);
  ASSERT_EQ(instances.size(), 1u);
  EXPECT_EQ(instances[0].http_port, 8000u);
}

TEST(ServerListTest, NotAServerList) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty body"},
      {"\r\n\r\n", "empty body"},
      {"<html><body>Service unavailable</body></html>", "first line"},
      {std::string("version 1.2\n\0\x01\x02", 15), "binary"},
      {"version 2.0\na_X_00\nHTTP appa 8000\n", "unknown server list version 2.0"},
      {"version x.y\n", "first line"},
      {"versions 1.2\n", "first line"},
      {"version 1.2" + std::string(kMaxBodyBytes, 'x'), "larger than"},
  };
  for (const auto& [body, want] : cases) {
    ParsedServerList parsed = ParseServerList(body);
    EXPECT_FALSE(parsed.ok) << body.substr(0, 40);
    EXPECT_NE(parsed.error.find(want), std::string::npos) << parsed.error;
    EXPECT_EQ(parsed.error.find('\n'), std::string::npos);
  }
}

TEST(ServerListTest, UnknownMinorVersionIsRead) {
  ParsedServerList parsed = ParseServerList("version 1.7\na_X_00\nHTTP appa 8000\n");
  ASSERT_TRUE(parsed.ok) << parsed.error;
  EXPECT_EQ(parsed.minor, 7);
  EXPECT_EQ(parsed.instances.size(), 1u);
}

// One bad line never drops the other servers; each skip has a reason.
TEST(ServerListTest, BadLinesAreSkippedWithAReason) {
  Skips skips;
  auto instances = Build(
      "version 1.2\n"
      "good_X_00\n"
      "HTTP\tappa\t8000\t\n"
      "HTTP\tappa\t0\t\n"         // port 0: row skipped (the good row stays)
      "HTTPS\tappa\t70000\t\n"    // out of range
      "HTTPS\tappa\tabc\t\n"      // not a number
      "HTTP\tap pa;x\t8001\t\n"   // a space in a TAB-separated host
      "HTTP\n"                    // too few fields: a name line? no: no separator => a name
      "\n"
      "bad\x01name\n"             // control character
      "HTTP\tappa\t8000\t\n"
      "\n"
      "x\"y,z\n"                  // cookie-unsafe
      "HTTP\tappa\t8000\t\n"
      "\n"
      "good_X_00\n"               // duplicate
      "HTTP\tappb\t8002\t\n"
      "\n"
      "DIAG\tappa\t3200\t\n"      // a row outside a record
      "nodns_X_01\n"
      "HTTP\tnowhere.invalid\t8000\t\n"
      "\n"
      "good_X_02\n"
      "HTTP\tappb\t8000\tLB=abc\n",  // a capacity that is not a number: ignored
      &skips);
  ASSERT_EQ(instances.size(), 3u) << skips.Summary();  // good_X_00, HTTP (a name), good_X_02
  EXPECT_EQ(instances[0].name, "HTTP");
  EXPECT_EQ(instances[0].address, "");  // no rows: not balanced
  EXPECT_EQ(instances[1].name, "good_X_00");
  EXPECT_EQ(instances[1].http_port, 8000u);
  EXPECT_EQ(instances[1].https_port, 0u);
  EXPECT_EQ(instances[2].name, "good_X_02");
  EXPECT_EQ(instances[2].capacity, 0u);
  EXPECT_EQ(skips.counts[SkipReason::kInvalidPort], 3u);
  EXPECT_EQ(skips.counts[SkipReason::kInvalidHost], 1u);
  EXPECT_EQ(skips.counts[SkipReason::kInvalidName], 2u);
  EXPECT_EQ(skips.counts[SkipReason::kDuplicateName], 1u);
  EXPECT_EQ(skips.counts[SkipReason::kMalformedRow], 1u);
  EXPECT_EQ(skips.counts[SkipReason::kUnknownHost], 1u);
  std::string summary = skips.Summary();
  EXPECT_NE(summary.find("entries skipped"), std::string::npos);
  for (char c : summary) {
    EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f) << summary;
  }
  EXPECT_NE(summary.find("bad\\x01name"), std::string::npos) << summary;
}

TEST(ServerListTest, LongNamesAndLines) {
  std::string body = "version 1.2\n" + std::string(kMaxInstanceNameLength + 1, 'n') +
                     "\nHTTP appa 8000\n\nok_X_00\nHTTP appa 8000 " + std::string(10000, 'd') +
                     "\nHTTP appa 8001\n";
  Skips skips;
  auto instances = Build(body, &skips);
  ASSERT_EQ(instances.size(), 1u);
  EXPECT_EQ(instances[0].http_port, 8001u);
  EXPECT_EQ(skips.counts[SkipReason::kInvalidName], 1u);
  EXPECT_EQ(skips.counts[SkipReason::kMalformedRow], 1u);
}

TEST(ServerListTest, ThousandsOfInstancesAreCapped) {
  std::string body = "version 1.2\r\n";
  const std::size_t n = kMaxInstances + 100;
  for (std::size_t i = 0; i < n; ++i) {
    body += "i" + std::to_string(i) + "_X_00\r\nDIAG\tappa\t3200\tLB=" + std::to_string(i % 9 + 1) +
            "\r\nHTTP\tappa\t" + std::to_string(8000 + i % 1000) + "\t\r\n\r\n";
  }
  Skips skips;
  auto instances = Build(body, &skips);
  EXPECT_EQ(instances.size(), kMaxInstances);
  EXPECT_EQ(skips.counts[SkipReason::kTooMany], 100u);
  EXPECT_LE(skips.messages.size(), kMaxSkipMessages);
}

TEST(ServerListTest, UnresolvedHostKeepsThePreviousAddress) {
  std::vector<model::SapInstance> previous(1);
  previous[0].name = "dns_X_00";
  previous[0].host = "flaky";
  previous[0].address = "10.9.9.9";
  Skips skips;
  auto instances = Build("version 1.2\ndns_X_00\nHTTP\tflaky\t8000\t\n", &skips, &previous);
  ASSERT_EQ(instances.size(), 1u);
  EXPECT_EQ(instances[0].address, "10.9.9.9");
  EXPECT_EQ(skips.total(), 0u);
}

Cidr MustCidr(std::string_view text) {
  std::string error;
  auto cidr = ParseCidr(text, &error);
  EXPECT_TRUE(cidr) << text << ": " << error;
  return cidr.value_or(Cidr{});
}

// Issue 23 item 2: a message server that lists 127.0.0.1, 0.0.0.0,
// localhost, 169.254.169.254 or the controller's own address no longer
// sends the proxies (and the controller's feed fetches) there.
TEST(ServerListTest, SpecialAndOwnAddressesAreRefusedByDefault) {
  constexpr std::string_view kBody =
      "version 1.2\n"
      "lo_X_00\nHTTP\t127.0.0.1\t8000\t\n"
      "any_X_01\nHTTP\t0.0.0.0\t8000\t\n"
      "name_X_02\nHTTP\tlocalhost\t8000\t\n"
      "meta_X_03\nHTTP\tmetadata\t80\t\n"
      "mcast_X_04\nHTTP\t224.0.0.1\t8000\t\n"
      "v6_X_05\nHTTP\tfe80::1\t8000\t\n"
      "mapped_X_06\nHTTP\tmapped\t8000\t\n"
      "own_X_07\nHTTP\tme\t8000\t\n"
      "ok_X_08\nHTTP\tappb\t8000\t\n"
      "two_X_09\nHTTP\ttwofaced\t8000\t\n";
  // The literal addresses resolve to themselves, as getaddrinfo does.
  AddressPolicy policy;
  policy.own = {*ParseIpAddress("10.0.0.9")};
  ParsedServerList parsed = ParseServerList(kBody);
  ASSERT_TRUE(parsed.ok);
  Skips skips;
  Resolver resolve = [](const std::string& host) -> std::vector<std::string> {
    static const std::map<std::string, std::vector<std::string>> table = {
        {"localhost", {"127.0.0.1", "::1"}}, {"metadata", {"169.254.169.254"}},
        {"mapped", {"::ffff:127.0.0.1"}},    {"me", {"10.0.0.9"}},
        {"appb", {"10.0.0.2"}},              {"twofaced", {"127.0.0.1", "10.0.0.7"}}};
    auto it = table.find(host);
    return it != table.end() ? it->second : std::vector<std::string>{host};
  };
  auto instances = BuildInstances(parsed, resolve, &policy, nullptr, &skips);
  // Only the ordinary address is used; a host with a loopback and an
  // ordinary address gets the ordinary one.
  ASSERT_EQ(instances.size(), 2u);
  EXPECT_EQ(instances[0].name, "ok_X_08");
  EXPECT_EQ(instances[0].address, "10.0.0.2");
  EXPECT_EQ(instances[1].name, "two_X_09");
  EXPECT_EQ(instances[1].address, "10.0.0.7");
  EXPECT_EQ(skips.counts[SkipReason::kRefusedAddress], 8u);
  EXPECT_EQ(SkipReasonName(SkipReason::kRefusedAddress), "refused_address");
  std::string summary = skips.Summary();
  EXPECT_NE(summary.find("instance \"lo_X_00\": host \"127.0.0.1\": address \"127.0.0.1\" refused: "
                         "loopback address, not in spec.allowedNetworks"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("\"0.0.0.0\" refused: unspecified address"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"169.254.169.254\" refused: link-local address"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("\"224.0.0.1\" refused: multicast address"), std::string::npos) << summary;

  // A previous address from before is not a way around it either.
  std::vector<model::SapInstance> previous(1);
  previous[0].name = "dns_X_00";
  previous[0].host = "flaky";
  previous[0].address = "127.0.0.1";
  Skips dns_skips;
  EXPECT_TRUE(Build("version 1.2\ndns_X_00\nHTTP\tflaky\t8000\t\n", &dns_skips, &previous).empty());
}

TEST(ServerListTest, AllowedNetworksNarrowAndOptIn) {
  AddressPolicy policy;
  policy.allowed = {MustCidr("10.0.0.0/30"), MustCidr("127.0.0.0/8")};
  Skips skips;
  auto instances = Build(
      "version 1.2\n"
      "a_X_00\nHTTP\tappa\t8000\t\n"       // 10.0.0.1: inside
      "b_X_01\nHTTP\tappb\t8000\t\n"       // 10.0.0.2: inside
      "v_X_02\nHTTP\tvhcala4hci\t8000\t\n" // 10.0.0.5: outside
      "l_X_03\nHTTP\tlocalhost\t8000\t\n"  // 127.0.0.1: listed (loopback tests)
      "m_X_04\nHTTP\tmetadata\t80\t\n",    // 169.254.169.254: not listed
      &skips, nullptr, policy);
  std::vector<std::string> names;
  for (const auto& instance : instances) {
    names.push_back(instance.name + "=" + instance.address);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"a_X_00=10.0.0.1", "b_X_01=10.0.0.2",
                                             "l_X_03=127.0.0.1"}));
  EXPECT_EQ(skips.counts[SkipReason::kRefusedAddress], 2u);
  EXPECT_NE(skips.Summary().find("\"10.0.0.5\" refused: outside spec.allowedNetworks"),
            std::string::npos)
      << skips.Summary();
}

TEST(AddressPolicyTest, CidrsAndKinds) {
  std::string error;
  EXPECT_FALSE(ParseCidr("10.1.0.0/8", &error));
  EXPECT_EQ(error, "host bits are set (did you mean 10.0.0.0/8?)");
  EXPECT_FALSE(ParseCidr("10.0.0.0/33", &error));
  EXPECT_FALSE(ParseCidr("10.0.0.0/", &error));
  EXPECT_FALSE(ParseCidr("erp.example.com/8", &error));
  EXPECT_FALSE(ParseCidr("fd00::/129", &error));
  EXPECT_FALSE(ParseCidr("10.0.0.0/8 ", &error));
  EXPECT_TRUE(ParseCidr("0.0.0.0/0", &error));
  EXPECT_TRUE(MustCidr("192.0.2.7").IsSingleAddress());
  EXPECT_TRUE(MustCidr("fd00::/8").Contains(*ParseIpAddress("fd12::1")));
  EXPECT_FALSE(MustCidr("fd00::/8").Contains(*ParseIpAddress("10.0.0.1")));
  // An IPv4 network also holds the IPv4-mapped form of its addresses.
  EXPECT_TRUE(MustCidr("127.0.0.0/8").Contains(*ParseIpAddress("::ffff:127.1.2.3")));
  for (auto [text, kind] : std::vector<std::pair<std::string, std::string>>{
           {"127.0.0.1", "loopback"},       {"127.255.0.1", "loopback"},
           {"::1", "loopback"},             {"::ffff:127.0.0.1", "loopback"},
           {"::127.0.0.1", "loopback"},     {"64:ff9b::169.254.169.254", "link-local"},
           {"0.0.0.0", "unspecified"},      {"0.1.2.3", "unspecified"},
           {"::", "unspecified"},           {"169.254.169.254", "link-local"},
           {"fe80::1", "link-local"},       {"febf::1", "link-local"},
           {"224.0.0.1", "multicast"},      {"ff02::1", "multicast"},
           {"255.255.255.255", "broadcast"}, {"10.0.0.1", ""},
           {"fd00::1", ""},                 {"2001:db8::1", ""},
           {"fec0::1", ""},
           // Found by the attack review: metadata services outside
           // link-local, and every IPv6 form that carries an IPv4 address.
           {"100.100.100.200", "cloud metadata"}, {"fd00:ec2::254", "cloud metadata"},
           {"::ffff:0:7f00:1", "loopback"},       {"2002:7f00:1::1", "loopback"},
           {"2002:a9fe:a9fe::", "link-local"},    {"64:ff9b::100.100.100.200", "cloud metadata"},
           {"2002:a00:1::1", ""},                 {"100.100.100.201", ""}}) {
    EXPECT_EQ(SpecialAddressKind(*ParseIpAddress(text)), kind) << text;
  }
  AddressPolicy own;
  own.own = {*ParseIpAddress("10.0.0.9")};
  EXPECT_NE(RefusalReason(own, "10.0.0.9"), "");
  EXPECT_NE(RefusalReason(own, "::ffff:10.0.0.9"), "");
  for (const char* carried : {"::10.0.0.9", "64:ff9b::a00:9", "::ffff:0:a00:9", "2002:a00:9::1"}) {
    EXPECT_NE(RefusalReason(own, carried), "") << carried << " carries the own address";
  }
  own.allowed = {MustCidr("10.0.0.0/8")};
  EXPECT_NE(RefusalReason(own, "10.0.0.9"), "") << "a network does not name the own address";
  own.allowed.push_back(MustCidr("10.0.0.9/32"));
  EXPECT_EQ(RefusalReason(own, "10.0.0.9"), "");
  EXPECT_EQ(RefusalReason(own, "not-an-ip"), "not an IP address");
}

TEST(AddressPolicyTest, GrpcPeerAddresses) {
  EXPECT_EQ(PeerAddress("ipv4:10.1.2.3:41000"), ParseIpAddress("10.1.2.3"));
  EXPECT_EQ(PeerAddress("ipv6:[fd00::7]:41000"), ParseIpAddress("fd00::7"));
  EXPECT_EQ(PeerAddress("ipv6:%5B::1%5D:1"), std::nullopt);
  EXPECT_EQ(PeerAddress("unix:/run/kwd.sock"), std::nullopt);
  EXPECT_EQ(PeerAddress("ipv4:10.1.2.3"), std::nullopt);
  EXPECT_EQ(PeerAddress(""), std::nullopt);
}

TEST(GroupInfoTest, ReferenceExampleAndTolerance) {
  ParsedGroupInfo parsed = ParseGroupInfo(
      "version 1.0\r\nappa_PRD_00\r\nappb_PRD_01\r\n\r\nPUBLIC:appa_PRD_00,appb_PRD_01\r\n"
      "WEBGUI:appb_PRD_01\r\nPUBLIC: appb_PRD_01 , appc_PRD_02\r\n\r\n");
  ASSERT_TRUE(parsed.ok) << parsed.error;
  ASSERT_EQ(parsed.groups.size(), 2u);
  EXPECT_EQ(parsed.groups["PUBLIC"],
            (std::vector<std::string>{"appa_PRD_00", "appb_PRD_01", "appc_PRD_02"}));
  EXPECT_EQ(parsed.groups["WEBGUI"], (std::vector<std::string>{"appb_PRD_01"}));

  ParsedGroupInfo bad = ParseGroupInfo(
      "version 1.0\nbad group:a_X_00\nG1:ok_X_00,bad\x02member\n\nG2:\n");
  ASSERT_TRUE(bad.ok);
  EXPECT_EQ(bad.groups.size(), 2u);
  EXPECT_EQ(bad.groups["G1"], (std::vector<std::string>{"ok_X_00"}));
  EXPECT_TRUE(bad.groups["G2"].empty());
  EXPECT_EQ(bad.skips.counts[SkipReason::kInvalidGroup], 2u);

  EXPECT_FALSE(ParseGroupInfo("<html>nope</html>").ok);
  EXPECT_FALSE(ParseGroupInfo("").ok);
}

// The reference's constructed URL map (section 10), CRLF.
constexpr std::string_view kUrlMap =
    "version 1.0\r\n"
    "PREFIX=/sap/bc/gui/sap/its/webgui/&GROUP=WEBGUI&CASE=&VHOST=*.*;&STACK=ABAP\r\n"
    "PREFIX=/irj~PORTAL/&GROUP=PORTAL&CASE=&VHOST=*.*;&STACK=J2EE\r\n"
    "\r\n";

TEST(UrlMapTest, ReferenceExample) {
  ParsedUrlMap parsed = ParseUrlMap(kUrlMap);
  ASSERT_TRUE(parsed.ok) << parsed.error;
  ASSERT_EQ(parsed.prefixes.size(), 2u);
  // Sorted by prefix, lowercased.
  EXPECT_EQ(parsed.prefixes[0], (model::SapUrlPrefix{"/irj~portal/", "PORTAL", true}));
  EXPECT_EQ(parsed.prefixes[1],
            (model::SapUrlPrefix{"/sap/bc/gui/sap/its/webgui/", "WEBGUI", false}));
  EXPECT_EQ(parsed.skips.total(), 0u);
}

struct UrlMapCase {
  std::string name;
  std::string body;
  std::vector<model::SapUrlPrefix> want;
  std::map<SkipReason, std::size_t> skipped;
};

TEST(UrlMapTest, LayoutVariantsAndBadLines) {
  const std::vector<UrlMapCase> cases = {
      {"lf, no closing blank line, spaces",
       "version 1.0\n  PREFIX=/sap/bc/a/ & GROUP=G1 \nPREFIX=/sap/bc/b/",
       {{"/sap/bc/a/", "G1", false}, {"/sap/bc/b/", "", false}},
       {}},
      {"attributes in any order and case, unknown ones ignored",
       "version 1.1\nstack=j2ee&Group=J1&FOO=bar&prefix=/nwa/\n",
       {{"/nwa/", "J1", true}},
       {}},
      {"closing slash added, url-encoded prefix decoded",
       "version 1.0\nPREFIX=/sap/public/ping\nPREFIX=%2Fsap%2Fopu%2Fodata%2F&CASE=X\n",
       {{"/sap/opu/odata/", "", false}, {"/sap/public/ping/", "", false}},
       {}},
      {"root, relative, bad characters, broken escape",
       "version 1.0\nPREFIX=/\nPREFIX=sap/x/\nPREFIX=/a b/\nPREFIX=/q?x/\nPREFIX=%2Fbad%zz\n"
       "PREFIX=/ok/\n",
       {{"/ok/", "", false}},
       {{SkipReason::kInvalidPrefix, 5}}},
      {"bad group, unknown stack, no prefix, duplicate (first wins)",
       "version 1.0\nPREFIX=/a/&GROUP=bad group\nPREFIX=/b/&GROUP=G\x01\nPREFIX=/c/&STACK=COBOL\n"
       "GROUP=G1\nPREFIX=/d/&GROUP=FIRST\nPREFIX=/D/&GROUP=SECOND\n",
       {{"/d/", "FIRST", false}},
       {{SkipReason::kInvalidGroup, 2},
        {SkipReason::kMalformedRow, 2},
        {SkipReason::kDuplicateName, 1}}},
      {"group name too long",
       "version 1.0\nPREFIX=/a/&GROUP=" + std::string(kMaxGroupNameLength + 1, 'G') + "\n",
       {},
       {{SkipReason::kInvalidGroup, 1}}},
      {"prefix too long",
       "version 1.0\nPREFIX=/" + std::string(kMaxUrlPrefixLength, 'a') + "/\n",
       {},
       {{SkipReason::kInvalidPrefix, 1}}},
      {"empty map", "version 1.0\r\n\r\n", {}, {}},
  };
  for (const auto& c : cases) {
    ParsedUrlMap parsed = ParseUrlMap(c.body);
    ASSERT_TRUE(parsed.ok) << c.name << ": " << parsed.error;
    EXPECT_EQ(parsed.prefixes, c.want) << c.name;
    EXPECT_EQ(parsed.skips.counts, c.skipped) << c.name << ": " << parsed.skips.Summary();
  }
}

TEST(UrlMapTest, NotAUrlMap) {
  for (std::string_view body :
       {std::string_view(""), std::string_view("<html>login</html>"),
        std::string_view("version 2.0\nPREFIX=/a/\n"), std::string_view("version 1.0\0x", 12)}) {
    ParsedUrlMap parsed = ParseUrlMap(body);
    EXPECT_FALSE(parsed.ok) << body;
    EXPECT_FALSE(parsed.error.empty());
  }
  EXPECT_FALSE(ParseUrlMap(std::string(kMaxBodyBytes + 1, 'a')).ok);
}

TEST(UrlMapTest, ThousandsOfPrefixesAreCapped) {
  std::string body = "version 1.0\n";
  for (std::size_t i = 0; i < kMaxUrlPrefixes + 5; ++i) {
    body += "PREFIX=/p" + std::to_string(i) + "/&GROUP=G\n";
  }
  ParsedUrlMap parsed = ParseUrlMap(body);
  ASSERT_TRUE(parsed.ok);
  EXPECT_EQ(parsed.prefixes.size(), kMaxUrlPrefixes);
  EXPECT_EQ(parsed.skips.counts[SkipReason::kTooMany], 5u);
}

TEST(SpecTest, ChecksAndUrl) {
  model::SapSystem system;
  system.metadata.name = "erp";
  system.spec.sid = "ERP";
  system.spec.message_server.host = "erp-ms.erp.svc";
  system.spec.message_server.http_port = 8101;
  SpecCheck check = CheckSapSystem(system);
  ASSERT_TRUE(check.config) << check.errors.front();
  EXPECT_EQ(ServerListUrl(*check.config), "http://erp-ms.erp.svc:8101/msgserver/text/logon?version=1.2");
  EXPECT_EQ(check.config->refresh_interval_seconds, 25);
  EXPECT_FALSE(check.config->url_map);
  EXPECT_EQ(check.config->url_map_path, "/sap/public/icf_info/icr_urlprefix");

  system.spec.message_server.host = "::1";
  system.spec.server_list_path = "/x?a=b";
  check = CheckSapSystem(system);
  ASSERT_TRUE(check.config);
  EXPECT_EQ(ServerListUrl(*check.config), "http://[::1]:8101/x?a=b&version=1.2");

  system.spec.sid = "erp";
  system.spec.message_server.https_port = 443;
  system.spec.message_server.host = "bad host";
  system.spec.refresh_interval_seconds = 0;
  system.spec.server_list_path = "no-slash";
  system.spec.url_map_path = "icr_urlprefix";
  check = CheckSapSystem(system);
  EXPECT_FALSE(check.config);
  EXPECT_EQ(check.errors.size(), 6u);
  EXPECT_NE(std::find_if(check.errors.begin(), check.errors.end(),
                         [](const std::string& e) { return e.starts_with("spec.urlMapPath:"); }),
            check.errors.end());
}

TEST(SpecTest, AllowedNetworks) {
  model::SapSystem system;
  system.metadata.name = "erp";
  system.spec.message_server.host = "erp-ms";
  system.spec.message_server.http_port = 8101;
  system.spec.allowed_networks = {"10.0.0.0/8", "127.0.0.0/8", "fd00::/8"};
  SpecCheck check = CheckSapSystem(system);
  ASSERT_TRUE(check.config) << check.errors.front();
  EXPECT_EQ(check.config->allowed_networks.size(), 3u);
  system.spec.allowed_networks = {"10.0.0.0/8", "10.1.0.0/8", "bad\x01"};
  check = CheckSapSystem(system);
  EXPECT_FALSE(check.config);
  ASSERT_EQ(check.errors.size(), 2u);
  EXPECT_EQ(check.errors[0],
            "spec.allowedNetworks[1]: \"10.1.0.0/8\" host bits are set (did you mean 10.0.0.0/8?)");
  EXPECT_EQ(check.errors[1].find('\x01'), std::string::npos);
  system.spec.allowed_networks.assign(65, "10.0.0.0/8");
  check = CheckSapSystem(system);
  EXPECT_FALSE(check.config);
}

}  // namespace
}  // namespace kwd::sapsystem
