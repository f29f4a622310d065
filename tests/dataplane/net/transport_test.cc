#include "dataplane/net/transport.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>

#include "dataplane/net/event_loop.h"

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


// ---- batched sends (io_uring) ----

// Reads everything the socket holds now.
std::string ReadAvailable(int fd) {
  std::string out;
  char buf[65536];
  for (int i = 0; i < 100'000; ++i) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) {
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class BatchedTransportTest : public PlainTransportTest {
 protected:
  void SetUp() override {
    PlainTransportTest::SetUp();
    EventLoop::SetIoUringMode(IoUringMode::kAuto, nullptr);
    loop_ = std::make_unique<EventLoop>();
    if (!loop_->batching_sends()) {
      GTEST_SKIP() << "io_uring is not available here";
    }
  }
  std::unique_ptr<EventLoop> loop_;
};

TEST_F(BatchedTransportTest, ManyWritesOfOneBatchArriveInOrderAfterOneFlush) {
  PlainTransport a(fds_[0], loop_.get());
  PlainTransport b(fds_[1], loop_.get());
  std::string expected_a;
  std::string expected_b;
  for (int i = 0; i < 200; ++i) {
    std::string line = "a-line " + std::to_string(i) + "\n";
    ASSERT_EQ(a.Write(line.data(), line.size()), static_cast<ssize_t>(line.size()));
    expected_a += line;
    line = "b-line " + std::to_string(i) + "\n";
    ASSERT_EQ(b.Write(line.data(), line.size()), static_cast<ssize_t>(line.size()));
    expected_b += line;
  }
  EXPECT_EQ(a.queued(), expected_a.size());
  EXPECT_EQ(ReadAvailable(fds_[1]), "") << "nothing is sent before the batch ends";
  loop_->FlushSends();
  EXPECT_EQ(a.queued(), 0u);
  EXPECT_EQ(b.queued(), 0u);
  EXPECT_EQ(ReadAvailable(fds_[1]), expected_a);
  EXPECT_EQ(ReadAvailable(fds_[0]), expected_b);
}

TEST_F(BatchedTransportTest, AFullSocketKeepsTheRestQueuedAndResumesOnWritable) {
  int small = 4096;
  ::setsockopt(fds_[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::setsockopt(fds_[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  PlainTransport a(fds_[0], loop_.get());
  std::string sent;
  std::string received;
  int would_block = 0;
  // Writes of 1000 bytes (queued) until the transport reports the socket full.
  for (int i = 0; i < 100'000 && would_block == 0; ++i) {
    std::string chunk(1000, static_cast<char>('a' + i % 26));
    ssize_t n = a.Write(chunk.data(), chunk.size());
    if (n == Transport::kWouldBlock) {
      ++would_block;
      break;
    }
    ASSERT_EQ(n, 1000);
    sent += chunk;
    if (i % 8 == 7) {
      loop_->FlushSends();  // the end of a batch
    }
  }
  ASSERT_EQ(would_block, 1) << "a full socket blocks the transport";
  EXPECT_GT(a.queued(), 0u) << "the bytes the socket did not take stay queued";
  // The peer reads; EPOLLOUT reaches the transport; the rest goes.
  for (int round = 0; round < 100'000 && received.size() < sent.size(); ++round) {
    received += ReadAvailable(fds_[1]);
    a.OnWritable();
    loop_->FlushSends();
    (void)a.FlushQueued();
  }
  EXPECT_EQ(a.queued(), 0u);
  ASSERT_EQ(received.size(), sent.size());
  EXPECT_TRUE(received == sent) << "bytes arrive whole and in order";
  ASSERT_EQ(a.Write("z", 1), 1) << "writable again";
}

TEST_F(BatchedTransportTest, BeforeCloseHandsQueuedBytesToTheKernel) {
  auto a = std::make_unique<PlainTransport>(fds_[0], loop_.get());
  ASSERT_EQ(a->Write("HTTP/1.1 200 OK\r\n\r\n", 19), 19);
  ASSERT_EQ(a->queued(), 19u);
  a->BeforeClose();
  ::close(fds_[0]);
  fds_[0] = ::socket(AF_UNIX, SOCK_STREAM, 0);  // TearDown closes something
  loop_->FlushSends();  // nothing left for the closed descriptor
  EXPECT_EQ(ReadAvailable(fds_[1]), "HTTP/1.1 200 OK\r\n\r\n");
  a.reset();
}

TEST_F(BatchedTransportTest, ADestroyedTransportLeavesNoSendQueued) {
  auto a = std::make_unique<PlainTransport>(fds_[0], loop_.get());
  ASSERT_EQ(a->Write("lost", 4), 4);
  a.reset();            // the owner was deleted without a close (a bug, but safe)
  loop_->FlushSends();  // must not touch the freed transport
  EXPECT_EQ(ReadAvailable(fds_[1]), "");
}

TEST_F(BatchedTransportTest, WritesToAResetPeerFail) {
  PlainTransport a(fds_[0], loop_.get());
  ::close(fds_[1]);
  fds_[1] = -1;
  ASSERT_EQ(a.Write("x", 1), 1);
  loop_->FlushSends();
  EXPECT_EQ(a.Write("x", 1), Transport::kError);
}

// Whether `fd` is an open descriptor of this process.
bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

// Connection: close with a small answer: the queued bytes and the close go in
// the loop's batched submit (the send linked before the close), no send(2)
// or close(2) of their own; the peer reads the whole answer, then its end.
TEST_F(BatchedTransportTest, CloseBatchedSendsTheQueuedBytesThenClosesTheSocket) {
  auto a = std::make_unique<PlainTransport>(fds_[0], loop_.get());
  ASSERT_EQ(a->Write("HTTP/1.1 200 OK\r\n", 17), 17);
  ASSERT_EQ(a->Write("Connection: close\r\n\r\n", 21), 21);
  ASSERT_TRUE(a->CanCloseBatched());
  a->CloseBatched();
  EXPECT_TRUE(IsOpen(fds_[0])) << "nothing happens before the batch ends";
  EXPECT_EQ(ReadAvailable(fds_[1]), "");
  loop_->FlushSends();
  EXPECT_FALSE(IsOpen(fds_[0])) << "closed by the ring";
  fds_[0] = ::socket(AF_UNIX, SOCK_STREAM, 0);  // TearDown closes something
  a.reset();
  char buf[64];
  ssize_t n = ::recv(fds_[1], buf, sizeof buf, MSG_DONTWAIT);
  ASSERT_EQ(n, 38);
  EXPECT_EQ(std::string(buf, 38), "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(::recv(fds_[1], buf, sizeof buf, MSG_DONTWAIT), 0) << "then the end of the stream";
}

TEST_F(BatchedTransportTest, CloseBatchedWithNothingQueuedClosesAtTheEndOfTheBatch) {
  PlainTransport a(fds_[0], loop_.get());
  ASSERT_TRUE(a.CanCloseBatched());
  a.CloseBatched();
  EXPECT_TRUE(IsOpen(fds_[0]));
  loop_->FlushSends();
  EXPECT_FALSE(IsOpen(fds_[0]));
  fds_[0] = ::socket(AF_UNIX, SOCK_STREAM, 0);
  char buf[8];
  EXPECT_EQ(::recv(fds_[1], buf, sizeof buf, MSG_DONTWAIT), 0);
}

// The peer is gone: the linked send fails, which cancels the ring's close;
// the loop closes the socket itself then (with a reset): no descriptor leaks.
TEST_F(BatchedTransportTest, ACloseAfterAFailedSendStillClosesTheSocket) {
  PlainTransport a(fds_[0], loop_.get());
  ::close(fds_[1]);
  fds_[1] = -1;
  ASSERT_EQ(a.Write("lost", 4), 4);
  ASSERT_TRUE(a.CanCloseBatched());
  a.CloseBatched();
  loop_->FlushSends();
  EXPECT_FALSE(IsOpen(fds_[0]));
  fds_[0] = ::socket(AF_UNIX, SOCK_STREAM, 0);
}

// Only a connection that gave the kernel little in all: a larger answer (or
// a long keep-alive connection) might not fit its send buffer whole, and a
// short send would not stop the linked close. Those close as before.
TEST_F(BatchedTransportTest, CloseBatchedOnlyForConnectionsThatSentLittle) {
  PlainTransport a(fds_[0], loop_.get());
  std::string big(PlainTransport::kMaxBytesForBatchedClose + 1, 'x');
  ASSERT_EQ(a.Write(big.data(), big.size()), static_cast<ssize_t>(big.size()));
  EXPECT_FALSE(a.CanCloseBatched()) << "queued";
  loop_->FlushSends();
  EXPECT_EQ(a.queued(), 0u);
  EXPECT_FALSE(a.CanCloseBatched()) << "sent before";
  PlainTransport b(fds_[1], loop_.get());
  std::string half(PlainTransport::kMaxBytesForBatchedClose / 2, 'y');
  ASSERT_EQ(b.Write(half.data(), half.size()), static_cast<ssize_t>(half.size()));
  loop_->FlushSends();
  ASSERT_EQ(b.Write(half.data(), half.size()), static_cast<ssize_t>(half.size()));
  EXPECT_TRUE(b.CanCloseBatched()) << "exactly the limit";
  ASSERT_EQ(b.Write("z", 1), 1);
  EXPECT_FALSE(b.CanCloseBatched());
  PlainTransport direct(fds_[0]);  // no loop: direct sends only
  EXPECT_FALSE(direct.CanCloseBatched());
}

// A loop destroyed with a close still queued closes the descriptor itself.
TEST_F(BatchedTransportTest, ALoopDestroyedWithQueuedClosesClosesThem) {
  {
    PlainTransport a(fds_[0], loop_.get());
    ASSERT_EQ(a.Write("bye", 3), 3);
    a.CloseBatched();
  }  // the transport goes first (its queued send is cancelled; the close stays)
  loop_.reset();
  EXPECT_FALSE(IsOpen(fds_[0]));
  fds_[0] = ::socket(AF_UNIX, SOCK_STREAM, 0);
}

int g_reported_error = 0;
int g_reports = 0;

TEST(IoUringFallbackTest, FailedSetUpIsReportedOnceAndSendsGoDirect) {
  g_reports = 0;
  EventLoop::SetIoUringMode(IoUringMode::kAuto, [](int error) {
    g_reported_error = error;
    ++g_reports;
  });
  EventLoop::FailIoUringSetupForTesting(EPERM);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  {
    EventLoop one;
    EventLoop two;
    EXPECT_FALSE(one.batching_sends());
    EXPECT_FALSE(two.batching_sends());
    PlainTransport a(fds[0], &one);
    ASSERT_EQ(a.Write("direct", 6), 6);
    EXPECT_EQ(a.queued(), 0u);
    EXPECT_EQ(ReadAvailable(fds[1]), "direct") << "sent at once, without a batch";
  }
  EXPECT_EQ(g_reports, 1) << "one line per process, not per worker";
  EXPECT_EQ(g_reported_error, EPERM);
  EventLoop::FailIoUringSetupForTesting(0);
  EventLoop::SetIoUringMode(IoUringMode::kOff, nullptr);
  {
    EventLoop off;
    EXPECT_FALSE(off.batching_sends()) << "--io-uring off";
  }
  EventLoop::SetIoUringMode(IoUringMode::kAuto, nullptr);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace kwd::net
