#include "dataplane/net/transport.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace kwd::net {
namespace {

class PlainTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds_), 0);
  }
  void TearDown() override {
    ::close(fds_[0]);
    if (fds_[1] >= 0) {
      ::close(fds_[1]);
    }
  }
  int fds_[2] = {-1, -1};
};

TEST_F(PlainTransportTest, ReadsWritesAndReportsADrainedSocket) {
  PlainTransport a(fds_[0]);
  PlainTransport b(fds_[1]);
  EXPECT_TRUE(a.established());
  EXPECT_EQ(a.Handshake(), Transport::HandshakeStatus::kDone);
  EXPECT_EQ(a.tls(), nullptr);
  char buf[64];
  bool drained = false;
  EXPECT_EQ(a.Read(buf, sizeof buf, &drained), Transport::kWouldBlock);
  EXPECT_TRUE(drained);
  ASSERT_EQ(b.Write("hello", 5), 5);
  drained = false;
  ASSERT_EQ(a.Read(buf, sizeof buf, &drained), 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_TRUE(drained) << "a short read empties the socket";
  ASSERT_EQ(b.Write("0123456789", 10), 10);
  ASSERT_EQ(a.Read(buf, 4, &drained), 4);
  EXPECT_FALSE(drained) << "a full read may leave bytes behind";
  ::close(fds_[1]);
  fds_[1] = -1;
  ASSERT_EQ(a.Read(buf, sizeof buf, &drained), 6);
  EXPECT_EQ(a.Read(buf, sizeof buf, &drained), Transport::kEof);
}

TEST_F(PlainTransportTest, WriteToAFullSocketWouldBlockAndToAClosedPeerFails) {
  PlainTransport a(fds_[0]);
  std::string chunk(65536, 'x');
  ssize_t n = 0;
  for (int i = 0; i < 1000 && (n = a.Write(chunk.data(), chunk.size())) > 0; ++i) {
  }
  EXPECT_EQ(n, Transport::kWouldBlock);
  ::close(fds_[1]);
  fds_[1] = -1;
  EXPECT_EQ(a.Write("x", 1), Transport::kError);
}

}  // namespace
}  // namespace kwd::net
