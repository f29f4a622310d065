#include "dataplane/net/transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

// ---- batched receives (read-ahead through io_uring) ----

// An edge-triggered reader on the loop, as the proxy's connections are: it
// opts in to the read-ahead while `opt_in`, and `on_io` handles each event.
struct Reader final : IoHandler {
  Reader(EventLoop* loop, int fd) : transport(std::make_unique<PlainTransport>(fd, loop)) {}
  void OnIo(uint32_t events) override {
    ++events_seen;
    BatchedRecv* recv = transport != nullptr ? transport->ReadAhead() : nullptr;
    read_ahead_seen = read_ahead_seen || (recv != nullptr && recv->pending());
    on_io(events);
  }
  BatchedRecv* ReadAhead() override {
    return opt_in && transport != nullptr ? transport->ReadAhead() : nullptr;
  }
  // Reads in `chunk`-byte pieces until the socket is drained, the stream
  // ends or fails (what the proxy's ReadInto loop does).
  void ReadAll(size_t chunk) {
    std::string buf(chunk, '\0');
    for (int i = 0; i < 100'000; ++i) {
      bool drained = false;
      ssize_t n = transport->Read(buf.data(), chunk, &drained);
      if (n > 0) {
        got.append(buf.data(), static_cast<size_t>(n));
      } else {
        last = n;
        if (n != Transport::kWouldBlock) {
          ended = true;
        }
        return;
      }
      if (drained) {
        return;
      }
    }
  }
  std::unique_ptr<PlainTransport> transport;
  bool opt_in = true;
  std::function<void(uint32_t)> on_io = [](uint32_t) {};
  std::string got;
  ssize_t last = 1;
  bool ended = false;
  bool read_ahead_seen = false;
  int events_seen = 0;
};

// Runs `loop` until `done` holds after an iteration's events (or 10 s).
void RunUntil(EventLoop* loop, const std::function<bool()>& done) {
  struct Check {
    EventLoop* loop;
    std::function<bool()> done;
    int64_t deadline;
    Timer timer{this, [](void* self) {
                  auto* c = static_cast<Check*>(self);
                  if (c->done() || MonotonicMs() > c->deadline) {
                    c->loop->Stop();
                  } else {
                    c->loop->Schedule(&c->timer, 1);
                  }
                }};
  } check{loop, done, MonotonicMs() + 10'000};
  loop->Schedule(&check.timer, 0);
  loop->Run();
}

// A connected loopback TCP pair (a reset needs TCP).
void TcpPair(int* client, int* server) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  *client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(*client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  *server = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
  ASSERT_GE(*server, 0);
  ::close(listener);
}

void WriteAll(int fd, std::string_view bytes) {
  for (int i = 0; i < 100'000 && !bytes.empty(); ++i) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

using ReadAheadTest = BatchedTransportTest;

TEST_F(ReadAheadTest, PipelinedRequestsAndALargeBodyReachTheOwnerByteExact) {
  std::string sent = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string body(3 * EventLoop::kRecvSlotBytes + 123, '\0');
  for (size_t i = 0; i < body.size(); ++i) {
    body[i] = static_cast<char>('a' + i % 26);
  }
  sent += "POST /c HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  WriteAll(fds_[1], sent);
  Reader reader(loop_.get(), fds_[0]);
  reader.on_io = [&](uint32_t) { reader.ReadAll(1000); };  // pieces smaller than a slot
  ASSERT_TRUE(loop_->Add(fds_[0], EPOLLIN | EPOLLET, &reader));
  RunUntil(loop_.get(), [&] { return reader.got.size() >= sent.size(); });
  EXPECT_TRUE(reader.read_ahead_seen) << "the first event's bytes came from the read-ahead";
  EXPECT_TRUE(reader.got == sent) << reader.got.size() << " of " << sent.size() << " bytes";
  // More bytes later: a new edge, a new read-ahead.
  reader.read_ahead_seen = false;
  WriteAll(fds_[1], "GET /d HTTP/1.1\r\n\r\n");
  RunUntil(loop_.get(), [&] { return reader.got.size() > sent.size(); });
  EXPECT_TRUE(reader.read_ahead_seen);
  EXPECT_TRUE(reader.got == sent + "GET /d HTTP/1.1\r\n\r\n") << reader.got.size();
  loop_->Remove(fds_[0]);
}

TEST_F(ReadAheadTest, EndOfStreamAndResetAreSeenThroughTheReadAhead) {
  {
    WriteAll(fds_[1], "last words");
    ::shutdown(fds_[1], SHUT_WR);
    Reader reader(loop_.get(), fds_[0]);
    reader.on_io = [&](uint32_t) {
      for (int i = 0; i < 10 && !reader.ended; ++i) {
        reader.ReadAll(4096);
      }
    };
    ASSERT_TRUE(loop_->Add(fds_[0], EPOLLIN | EPOLLRDHUP | EPOLLET, &reader));
    RunUntil(loop_.get(), [&] { return reader.ended; });
    EXPECT_TRUE(reader.read_ahead_seen);
    EXPECT_EQ(reader.got, "last words");
    EXPECT_EQ(reader.last, Transport::kEof);
    loop_->Remove(fds_[0]);
  }
  int client = -1;
  int server = -1;
  TcpPair(&client, &server);
  Reader reader(loop_.get(), server);
  // The reset alone: the read-ahead's first result is the error.
  reader.on_io = [&](uint32_t) { reader.ReadAll(4096); };
  ASSERT_TRUE(loop_->Add(server, EPOLLIN | EPOLLRDHUP | EPOLLET, &reader));
  linger reset{1, 0};
  ASSERT_EQ(::setsockopt(client, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
  ::close(client);
  RunUntil(loop_.get(), [&] { return reader.ended; });
  EXPECT_TRUE(reader.read_ahead_seen);
  EXPECT_EQ(reader.last, Transport::kError);
  loop_->Remove(server);
  ::close(server);
}

TEST_F(ReadAheadTest, BytesTheOwnerDoesNotTakeOnTheEventAreKeptInOrder) {
  Reader reader(loop_.get(), fds_[0]);
  int taken_on_event = 0;
  reader.on_io = [&](uint32_t) {
    if (reader.events_seen == 1) {
      return;  // back-pressure: does not read on this event
    }
    if (reader.events_seen == 2) {
      char buf[5];
      bool drained = false;
      taken_on_event = static_cast<int>(reader.transport->Read(buf, sizeof buf, &drained));
      reader.got.append(buf, 5);
      return;  // reads a little, then stops
    }
  };
  ASSERT_TRUE(loop_->Add(fds_[0], EPOLLIN | EPOLLRDHUP | EPOLLET, &reader));
  WriteAll(fds_[1], "first batch;");
  RunUntil(loop_.get(), [&] { return reader.events_seen >= 1; });
  EXPECT_TRUE(reader.read_ahead_seen);
  EXPECT_EQ(reader.transport->ReadAhead(), nullptr) << "holding kept bytes: not read ahead";
  WriteAll(fds_[1], "second;");
  RunUntil(loop_.get(), [&] { return reader.events_seen >= 2; });
  EXPECT_EQ(taken_on_event, 5);
  WriteAll(fds_[1], "third");
  ::shutdown(fds_[1], SHUT_WR);
  RunUntil(loop_.get(), [&] { return reader.events_seen >= 3; });
  // Now the owner reads everything: the kept bytes first, then the socket.
  for (int i = 0; i < 10 && !reader.ended; ++i) {
    reader.ReadAll(3);
  }
  EXPECT_EQ(reader.got, "first batch;second;third");
  EXPECT_EQ(reader.last, Transport::kEof);
  loop_->Remove(fds_[0]);
}

TEST_F(ReadAheadTest, AnEndOfStreamNotTakenOnTheEventIsKept) {
  Reader reader(loop_.get(), fds_[0]);
  ASSERT_TRUE(loop_->Add(fds_[0], EPOLLIN | EPOLLRDHUP | EPOLLET, &reader));
  ::shutdown(fds_[1], SHUT_WR);
  RunUntil(loop_.get(), [&] { return reader.events_seen >= 1; });
  EXPECT_TRUE(reader.read_ahead_seen);
  char buf[8];
  bool drained = false;
  EXPECT_EQ(reader.transport->Read(buf, sizeof buf, &drained), Transport::kEof);
  loop_->Remove(fds_[0]);
}

TEST_F(ReadAheadTest, AConnectionClosedInTheBatchOfItsReadAheadIsNotTouchedAgain) {
  int more[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, more), 0);
  Reader one(loop_.get(), fds_[0]);
  Reader two(loop_.get(), more[0]);
  // Whichever runs first closes the other (whose read-ahead of the same
  // batch is pending), as a client connection closes its upstream.
  auto close_other = [&](Reader& self, Reader& other) {
    self.ReadAll(4096);
    if (other.transport != nullptr) {
      other.transport->BeforeClose();
      loop_->Remove(other.transport->fd());
      other.transport.reset();
    }
  };
  one.on_io = [&](uint32_t) {
    if (one.transport != nullptr) {
      close_other(one, two);
    }
  };
  two.on_io = [&](uint32_t) {
    if (two.transport != nullptr) {
      close_other(two, one);
    }
  };
  ASSERT_TRUE(loop_->Add(fds_[0], EPOLLIN | EPOLLET, &one));
  ASSERT_TRUE(loop_->Add(more[0], EPOLLIN | EPOLLET, &two));
  WriteAll(fds_[1], "to one");
  WriteAll(more[1], "to two");
  RunUntil(loop_.get(), [&] { return one.events_seen + two.events_seen >= 2; });
  EXPECT_EQ(one.events_seen + two.events_seen, 2) << "both in one batch";
  EXPECT_TRUE(one.read_ahead_seen || two.read_ahead_seen);
  EXPECT_NE(one.got == "to one", two.got == "to two") << "the first read, the second was closed";
  loop_->Remove(fds_[0]);
  loop_->Remove(more[0]);
  ::close(more[0]);
  ::close(more[1]);
  // A transport destroyed with its read-ahead not taken at all.
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, more), 0);
  Reader three(loop_.get(), more[0]);
  three.on_io = [&](uint32_t) { three.transport.reset(); };
  ASSERT_TRUE(loop_->Add(more[0], EPOLLIN | EPOLLET, &three));
  WriteAll(more[1], "never read");
  RunUntil(loop_.get(), [&] { return three.events_seen >= 1; });
  EXPECT_TRUE(three.read_ahead_seen);
  EXPECT_EQ(three.transport, nullptr);
  loop_->Remove(more[0]);
  ::close(more[0]);
  ::close(more[1]);
}

// The first reads of newly accepted connections (Worker::StartGroup): many
// sockets read in one kernel entry outside any epoll event. As many as the
// iteration's arena has slots for get a result (the ring's 256 entries), the
// others are left to read directly; asking again in the same iteration adds
// nothing. What owners do not take stays in order in their transports, and so
// do ends of stream and resets.
TEST_F(ReadAheadTest, ReadAheadNowReadsManySocketsAtOnceAndKeepsWhatIsNotTaken) {
  constexpr int kSockets = 300;  // more than the ring's 256 entries
  std::vector<std::array<int, 2>> pairs(kSockets);
  std::vector<std::unique_ptr<PlainTransport>> transports;
  std::vector<std::string> sent(kSockets + 1);
  for (int i = 0; i < kSockets; ++i) {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pairs[i].data()), 0);
    transports.push_back(std::make_unique<PlainTransport>(pairs[i][0], loop_.get()));
    if (i % 3 == 0) {
      sent[i] = "GET /" + std::to_string(i) + " HTTP/1.1\r\n\r\n";
      WriteAll(pairs[i][1], sent[i]);
    } else if (i % 3 == 2) {
      sent[i] = "last " + std::to_string(i);
      WriteAll(pairs[i][1], sent[i]);
      ::shutdown(pairs[i][1], SHUT_WR);
    }  // i % 3 == 1: a silent client
  }
  int client = -1;
  int server = -1;
  TcpPair(&client, &server);  // a client that resets at once
  ASSERT_EQ(::fcntl(server, F_SETFL, O_NONBLOCK), 0);
  linger reset{1, 0};
  ASSERT_EQ(::setsockopt(client, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
  ::close(client);
  transports.push_back(std::make_unique<PlainTransport>(server, loop_.get()));
  std::vector<std::string> got(kSockets + 1);
  int pending_first = -1;
  int pending_again = -1;
  bool reset_pending = false;
  bool ran = false;
  loop_->Post([&] {
    std::vector<BatchedRecv*> recvs;
    // The reset socket first: it gets a slot.
    recvs.push_back(transports[kSockets]->ReadAhead());
    for (int i = 0; i < kSockets; ++i) {
      recvs.push_back(transports[i]->ReadAhead());
    }
    for (BatchedRecv* recv : recvs) {
      ASSERT_NE(recv, nullptr);
    }
    auto pending = [&] {
      int n = 0;
      for (BatchedRecv* recv : recvs) {
        n += recv->pending() ? 1 : 0;
      }
      return n;
    };
    loop_->ReadAheadNow(recvs.data(), recvs.size());
    pending_first = pending();
    loop_->ReadAheadNow(recvs.data(), recvs.size());
    pending_again = pending();
    reset_pending = recvs[0]->pending();
    // Half the owners take a little now, the others nothing.
    for (int i = 0; i < kSockets; i += 2) {
      char buf[3];
      bool drained = false;
      ssize_t n = transports[i]->Read(buf, sizeof buf, &drained);
      if (n > 0) {
        got[i].append(buf, static_cast<size_t>(n));
      }
    }
    ran = true;
  });
  RunUntil(loop_.get(), [&] { return ran; });
  EXPECT_EQ(pending_first, 256) << "the ring's entries";
  EXPECT_EQ(pending_again, pending_first) << "no slot left in this iteration";
  EXPECT_TRUE(reset_pending);
  // Later iterations: every byte in order, then the socket's state.
  for (int i = 0; i <= kSockets; ++i) {
    SCOPED_TRACE(i);
    ssize_t last = 1;
    for (int reads = 0; reads < 100; ++reads) {
      char buf[4];
      bool drained = false;
      last = transports[i]->Read(buf, sizeof buf, &drained);
      if (last <= 0) {
        break;
      }
      got[i].append(buf, static_cast<size_t>(last));
    }
    EXPECT_EQ(got[i], sent[i]);
    if (i == kSockets) {
      EXPECT_EQ(last, Transport::kError);
    } else if (i % 3 == 2) {
      EXPECT_EQ(last, Transport::kEof);
    } else {
      EXPECT_EQ(last, Transport::kWouldBlock);
    }
  }
  transports.clear();
  for (auto& pair : pairs) {
    ::close(pair[0]);
    ::close(pair[1]);
  }
  ::close(server);
}

TEST(ReadAheadFallbackTest, WithoutARingTheOwnerReadsDirectly) {
  for (bool failed_set_up : {false, true}) {
    SCOPED_TRACE(failed_set_up ? "set-up failed" : "--io-uring off");
    if (failed_set_up) {
      EventLoop::SetIoUringMode(IoUringMode::kAuto, nullptr);
      EventLoop::FailIoUringSetupForTesting(ENOSYS);
    } else {
      EventLoop::SetIoUringMode(IoUringMode::kOff, nullptr);
    }
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    {
      EventLoop loop;
      Reader reader(&loop, fds[0]);
      reader.on_io = [&](uint32_t) { reader.ReadAll(4); };
      ASSERT_TRUE(loop.Add(fds[0], EPOLLIN | EPOLLET, &reader));
      WriteAll(fds[1], "direct reads");
      RunUntil(&loop, [&] { return reader.got.size() >= 12; });
      EXPECT_FALSE(reader.read_ahead_seen);
      EXPECT_EQ(reader.transport->ReadAhead(), nullptr);
      EXPECT_EQ(reader.got, "direct reads");
    }
    ::close(fds[0]);
    ::close(fds[1]);
  }
  EventLoop::FailIoUringSetupForTesting(0);
  EventLoop::SetIoUringMode(IoUringMode::kAuto, nullptr);
}

}  // namespace
}  // namespace kwd::net
