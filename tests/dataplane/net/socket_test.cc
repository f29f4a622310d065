#include "dataplane/net/socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>

namespace kwd::net {
namespace {

TEST(SocketTest, ParsesEndpoints) {
  struct Case {
    const char* text;
    bool ok;
    const char* canonical;
  };
  const Case cases[] = {
      {"127.0.0.1:8080", true, "127.0.0.1:8080"},
      {"0.0.0.0:0", true, "0.0.0.0:0"},
      {":9901", true, "0.0.0.0:9901"},
      {"[::1]:443", true, "[::1]:443"},
      {"localhost:80", true, "127.0.0.1:80"},
      {"127.0.0.1", false, ""},
      {"127.0.0.1:99999", false, ""},
      {"127.0.0.1:8x", false, ""},
      {"example.com:80", false, ""},
      {"[::1:80", false, ""},
  };
  for (const auto& c : cases) {
    Endpoint e;
    std::string error;
    EXPECT_EQ(ParseEndpoint(c.text, &e, &error), c.ok) << c.text;
    if (c.ok) {
      EXPECT_EQ(e.ToString(), c.canonical);
    } else {
      EXPECT_FALSE(error.empty()) << c.text;
    }
  }
}

// AddressString formats IPv4 by hand (no inet_ntop on the accept path): it
// must agree with inet_ntop on every octet width.
TEST(SocketTest, FormatsIpv4AddressesLikeInetNtop) {
  for (const char* text : {"0.0.0.0", "255.255.255.255", "127.0.0.1", "10.0.100.9", "1.20.255.0",
                           "192.168.1.10", "99.100.101.9"}) {
    Endpoint e;
    ASSERT_TRUE(MakeEndpoint(text, 80, &e)) << text;
    EXPECT_EQ(AddressString(e), text);
  }
  for (uint32_t ip = 0; ip < 300; ++ip) {
    Endpoint e;
    auto* a = reinterpret_cast<sockaddr_in*>(&e.addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(ip * 0x01010101u ^ (ip << 7));
    char expected[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->sin_addr, expected, sizeof expected);
    EXPECT_EQ(AddressString(e), expected);
  }
  Endpoint v6;
  ASSERT_TRUE(MakeEndpoint("::1", 80, &v6));
  EXPECT_EQ(AddressString(v6), "::1");
}

TEST(SocketTest, ListensOnAnEphemeralPortAndConnects) {
  Endpoint e;
  std::string error;
  ASSERT_TRUE(ParseEndpoint("127.0.0.1:0", &e, &error));
  int listener = Listen(e, true, 16, &error);
  ASSERT_GE(listener, 0) << error;
  Endpoint bound = LocalEndpoint(listener);
  EXPECT_NE(bound.port(), 0);
  int err = 0;
  int client = ConnectNonBlocking(bound, &err);
  ASSERT_GE(client, 0);
  close(client);
  close(listener);
}

TEST(SocketTest, ListenReportsBindFailure) {
  Endpoint e;
  std::string error;
  ASSERT_TRUE(ParseEndpoint("127.0.0.1:0", &e, &error));
  int first = Listen(e, false, 16, &error);
  ASSERT_GE(first, 0);
  Endpoint taken = LocalEndpoint(first);
  EXPECT_EQ(Listen(taken, false, 16, &error), -1);
  EXPECT_NE(error.find("bind 127.0.0.1:"), std::string::npos) << error;
  close(first);
}

// A client-first listener hands a connection over once its first bytes are
// there (TCP_DEFER_ACCEPT), and what it hands over has TCP_NODELAY from the
// listener (the proxy no longer sets it per accepted socket). A client that
// stays silent is still handed over, after about the defer period.
TEST(SocketTest, ClientFirstListenerAcceptsOnceDataArrivedWithNoDelayInherited) {
  Endpoint e;
  std::string error;
  ASSERT_TRUE(ParseEndpoint("127.0.0.1:0", &e, &error));
  int listener = Listen(e, false, 16, &error);
  ASSERT_GE(listener, 0) << error;
  PrepareClientFirstListener(listener, 1);
  Endpoint bound = LocalEndpoint(listener);
  auto blocking_connect = [&] {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&bound.addr), bound.len), 0);
    return fd;
  };
  auto accepted_within = [&](int timeout_ms) {
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) {
      return -1;
    }
    return accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  };
  auto no_delay = [](int fd) {
    int value = 0;
    socklen_t len = sizeof value;
    getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &len);
    return value;
  };

  // Connected (the client's side is established) but nothing sent: nothing
  // to accept. Only checked while well inside the defer period.
  auto start = std::chrono::steady_clock::now();
  int talker = blocking_connect();
  int early = accepted_within(100);
  if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(700)) {
    EXPECT_EQ(early, -1) << "accepted before any byte arrived";
  }
  if (early >= 0) {
    close(early);
  }
  ASSERT_EQ(send(talker, "GET", 3, 0), 3);
  int served = accepted_within(10'000);
  ASSERT_GE(served, 0);
  char buf[8];
  EXPECT_EQ(recv(served, buf, sizeof buf, 0), 3) << "the first bytes were not there at accept";
  EXPECT_EQ(no_delay(served), 1);

  // Silent: handed over anyway, about a second later (bounded wait).
  int silent = blocking_connect();
  int late = accepted_within(10'000);
  ASSERT_GE(late, 0) << "a silent client was never accepted";
  EXPECT_EQ(recv(late, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(no_delay(late), 1);
  for (int fd : {talker, served, silent, late, listener}) {
    close(fd);
  }
}

}  // namespace
}  // namespace kwd::net
