// Accepts through the loop's io_uring (EventLoop::Accept, BatchedAccept):
// rounds of accepts in one kernel entry, the first with the batch's
// read-ahead; accept4(2) when there is no ring or the kernel refuses the
// accept flags.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "dataplane/net/event_loop.h"

namespace kwd::net {
namespace {

// A non-blocking loopback TCP listener on an ephemeral port.
struct TestListener {
  TestListener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd, 512), 0);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  }
  ~TestListener() {
    for (int c : clients) {
      ::close(c);
    }
    ::close(fd);
  }
  // Connects a client (the handshake completes in the listener's queue);
  // returns its local port.
  uint16_t Connect() {
    int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(::connect(c, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    clients.push_back(c);
    sockaddr_in local{};
    socklen_t len = sizeof local;
    ::getsockname(c, reinterpret_cast<sockaddr*>(&local), &len);
    return ntohs(local.sin_port);
  }
  int fd = -1;
  sockaddr_in addr{};
  std::vector<int> clients;
};

uint16_t PortOf(const sockaddr_storage& addr) {
  return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
}

// A listener's handler: takes every connection on each event, as the
// proxy's workers do.
struct Acceptor final : IoHandler {
  Acceptor(EventLoop* loop, int listen_fd) : loop(loop), listen_fd(listen_fd) {
    accepts.Aim(listen_fd, BatchedAccept::kMaxRound);
  }
  ~Acceptor() {
    for (int fd : fds) {
      ::close(fd);
    }
  }
  void OnIo(uint32_t /*events*/) override { TakeAll(); }
  BatchedAccept* AcceptAhead() override {
    accepts.Aim(listen_fd, max_round);
    return ahead ? &accepts : nullptr;
  }
  // Accepts until the listener is empty (or fails): the errno it ended on.
  int TakeAll() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      int fd = loop->Accept(&accepts, &addr, &len);
      if (fd < 0) {
        return last_errno = errno;
      }
      fds.push_back(fd);
      ports.push_back(PortOf(addr));
    }
  }
  EventLoop* loop;
  int listen_fd;
  unsigned max_round = BatchedAccept::kMaxRound;
  bool ahead = true;
  BatchedAccept accepts;
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  int last_errno = 0;
};

// Runs `loop` until `done` holds (checked every millisecond, up to 10 s).
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

class RingAcceptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EventLoop::SetIoUringMode(IoUringMode::kAuto, nullptr);
    loop_ = std::make_unique<EventLoop>();
    if (!loop_->batching_sends()) {
      GTEST_SKIP() << "io_uring is not available here";
    }
    // IORING_ACCEPT_DONTWAIT came with Linux 6.10 (the kernel's version,
    // not the loop's behaviour, decides: a loop that never accepted through
    // the ring must fail these tests, not skip them).
    utsname name{};
    ASSERT_EQ(::uname(&name), 0);
    int major = 0;
    int minor = 0;
    if (std::sscanf(name.release, "%d.%d", &major, &minor) != 2 ||
        (major < 6 || (major == 6 && minor < 10))) {
      GTEST_SKIP() << "Linux " << name.release << " has no IORING_ACCEPT_DONTWAIT (6.10)";
    }
  }
  std::unique_ptr<EventLoop> loop_;
};

TEST_F(RingAcceptTest, ConnectionsAreAcceptedThroughTheRingNotByAccept4) {
  TestListener listener;
  Acceptor acceptor(loop_.get(), listener.fd);
  ASSERT_TRUE(loop_->Add(listener.fd, EPOLLIN | EPOLLET, &acceptor));
  std::vector<uint16_t> ports;
  for (int i = 0; i < 5; ++i) {
    ports.push_back(listener.Connect());
  }
  const uint64_t ring_before = loop_->ring_accepts();
  RunUntil(loop_.get(), [&] { return acceptor.fds.size() == 5; });
  ASSERT_EQ(acceptor.fds.size(), 5u);
  EXPECT_EQ(acceptor.last_errno, EAGAIN);
  EXPECT_EQ(acceptor.ports, ports) << "in the order the clients connected, with their addresses";
  EXPECT_EQ(loop_->direct_accepts(), 0u);
  EXPECT_GE(loop_->ring_accepts() - ring_before, 5u);
  for (size_t i = 0; i < acceptor.fds.size(); ++i) {
    const int fd = acceptor.fds[i];
    EXPECT_NE(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0) << i;
    EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << i;
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    ASSERT_EQ(::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len), 0);
    EXPECT_EQ(ntohs(peer.sin_port), ports[i]);
  }
  // The next burst of as many: its round is sized from this one, so one
  // kernel entry (the read-ahead's) accepts all of them and sees the
  // listener empty.
  for (int i = 0; i < 5; ++i) {
    listener.Connect();
  }
  const uint64_t submits_before = loop_->ring_submits();
  RunUntil(loop_.get(), [&] { return acceptor.fds.size() == 10; });
  EXPECT_EQ(acceptor.fds.size(), 10u);
  EXPECT_EQ(loop_->ring_submits() - submits_before, 1u);
  EXPECT_EQ(loop_->direct_accepts(), 0u);
}

// A readable socket's read-ahead and the listener's accepts go in the same
// kernel entry.
TEST_F(RingAcceptTest, TheFirstRoundGoesInTheKernelEntryOfTheReadAheads) {
  struct Receiver final : IoHandler {
    explicit Receiver(int fd) : recv(this, fd, [](void*) {}) {}
    BatchedRecv* ReadAhead() override { return &recv; }
    void OnIo(uint32_t /*events*/) override {
      if (recv.pending()) {
        got = recv.result();
        recv.Finish();
      }
    }
    BatchedRecv recv;
    int got = 0;
  };
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair), 0);
  Receiver receiver(pair[0]);
  ASSERT_TRUE(loop_->Add(pair[0], EPOLLIN | EPOLLET, &receiver));
  TestListener listener;
  Acceptor acceptor(loop_.get(), listener.fd);
  ASSERT_TRUE(loop_->Add(listener.fd, EPOLLIN | EPOLLET, &acceptor));
  ASSERT_EQ(::send(pair[1], "hello", 5, 0), 5);
  listener.Connect();
  const uint64_t submits_before = loop_->ring_submits();
  RunUntil(loop_.get(), [&] { return acceptor.fds.size() == 1 && receiver.got == 5; });
  EXPECT_EQ(receiver.got, 5) << "read ahead";
  EXPECT_EQ(acceptor.fds.size(), 1u);
  EXPECT_EQ(loop_->ring_submits() - submits_before, 1u);
  EXPECT_EQ(loop_->direct_accepts(), 0u);
  ::close(pair[0]);
  ::close(pair[1]);
}

TEST_F(RingAcceptTest, AnEmptyListenerAnswersEagainAtOnce) {
  TestListener listener;
  Acceptor acceptor(loop_.get(), listener.fd);
  const uint64_t ring_before = loop_->ring_accepts();
  const int64_t start = MonotonicMs();
  EXPECT_EQ(acceptor.TakeAll(), EAGAIN);
  EXPECT_LT(MonotonicMs() - start, 1000) << "the accept waited for a connection";
  EXPECT_GT(loop_->ring_accepts(), ring_before);
  EXPECT_EQ(loop_->direct_accepts(), 0u);
  EXPECT_TRUE(acceptor.fds.empty());
}

// More connections than a round takes: the rounds grow, all are accepted.
TEST_F(RingAcceptTest, ABurstLargerThanARoundIsAcceptedWhole) {
  TestListener listener;
  Acceptor acceptor(loop_.get(), listener.fd);
  ASSERT_TRUE(loop_->Add(listener.fd, EPOLLIN | EPOLLET, &acceptor));
  constexpr size_t kBurst = 150;
  for (size_t i = 0; i < kBurst; ++i) {
    listener.Connect();
  }
  const uint64_t submits_before = loop_->ring_submits();
  RunUntil(loop_.get(), [&] { return acceptor.fds.size() == kBurst; });
  EXPECT_EQ(acceptor.fds.size(), kBurst);
  EXPECT_EQ(loop_->direct_accepts(), 0u);
  // Rounds of 2, 4, ... 64: a handful of kernel entries, not one per accept.
  EXPECT_LE(loop_->ring_submits() - submits_before, 10u);
}

// A round larger than the connections waiting: the accept that finds the
// queue empty ends it, the kernel cancels the rest without trying them.
TEST_F(RingAcceptTest, AcceptsPastTheLastConnectionAreCancelledUntried) {
  TestListener listener;
  Acceptor acceptor(loop_.get(), listener.fd);
  for (int i = 0; i < 20; ++i) {
    listener.Connect();
  }
  EXPECT_EQ(acceptor.TakeAll(), EAGAIN);
  ASSERT_EQ(acceptor.fds.size(), 20u);
  // The next round is sized for about 30; one connection comes.
  listener.Connect();
  const uint64_t ring_before = loop_->ring_accepts();
  const uint64_t submits_before = loop_->ring_submits();
  EXPECT_EQ(acceptor.TakeAll(), EAGAIN);
  EXPECT_EQ(acceptor.fds.size(), 21u);
  EXPECT_EQ(loop_->ring_submits() - submits_before, 1u);
  // The one that accepted it and the one that found the queue empty.
  EXPECT_EQ(loop_->ring_accepts() - ring_before, 2u);
}

// The ring defers its task work to the waits of its own thread (Linux 6.1).
TEST_F(RingAcceptTest, TheRingIsSetUpWithDeferredTaskRun) {
  EXPECT_NE(loop_->ring_setup_flags() & IORING_SETUP_DEFER_TASKRUN, 0u);
  EXPECT_NE(loop_->ring_setup_flags() & IORING_SETUP_SINGLE_ISSUER, 0u);
}

// While descriptors ran short the owner takes one connection per round.
TEST_F(RingAcceptTest, ARoundOfOneAcceptsOneConnectionPerKernelEntry) {
  TestListener listener;
  Acceptor acceptor(loop_.get(), listener.fd);
  acceptor.accepts.Aim(listener.fd, 1);
  for (int i = 0; i < 3; ++i) {
    listener.Connect();
  }
  const uint64_t ring_before = loop_->ring_accepts();
  EXPECT_EQ(acceptor.TakeAll(), EAGAIN);
  EXPECT_EQ(acceptor.fds.size(), 3u);
  // Three accepts that found one each (the last saw the queue empty), at
  // most one more that found none.
  EXPECT_GE(loop_->ring_accepts() - ring_before, 3u);
  EXPECT_LE(loop_->ring_accepts() - ring_before, 4u);
}

// Out of descriptors: the accept fails with EMFILE, and once descriptors
// free up the next accept is a new one, not the round's stale failure; no
// connection is lost.
TEST_F(RingAcceptTest, OutOfDescriptorsFailsWithEmfileThenAcceptsAgain) {
  TestListener listener;
  Acceptor acceptor(loop_.get(), listener.fd);
  acceptor.accepts.Aim(listener.fd, BatchedAccept::kMaxRound);
  listener.Connect();
  listener.Connect();
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // The lowest free descriptor becomes the limit: no new descriptor.
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int fd = loop_->Accept(&acceptor.accepts, &addr, &len);
  const int error = errno;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(error, EMFILE);
  EXPECT_EQ(loop_->direct_accepts(), 0u);
  EXPECT_EQ(acceptor.TakeAll(), EAGAIN);
  EXPECT_EQ(acceptor.fds.size(), 2u) << "both connections accepted once descriptors were back";
}

// Sockets accepted in a round and not taken are closed with the round
// (Discard, or the owner's end): their clients see the end of the stream.
TEST_F(RingAcceptTest, SocketsAcceptedAndNotTakenAreClosedByDiscard) {
  TestListener listener;
  Acceptor acceptor(loop_.get(), listener.fd);
  listener.Connect();
  listener.Connect();
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int first = loop_->Accept(&acceptor.accepts, &addr, &len);
  ASSERT_GE(first, 0);
  acceptor.fds.push_back(first);
  ASSERT_TRUE(acceptor.accepts.pending()) << "the round of 2 accepted the second one too";
  acceptor.accepts.Discard();
  EXPECT_FALSE(acceptor.accepts.pending());
  timeval timeout{5, 0};
  ::setsockopt(listener.clients[1], SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  char byte;
  EXPECT_EQ(::recv(listener.clients[1], &byte, 1, 0), 0) << "closed, not left open";
}

// --io-uring off (a failed io_uring set-up leaves the loop the same way; it
// is reported once per process, which transport_test checks), and a kernel
// that refuses the accept flags.
TEST(RingAcceptFallbackTest, WithoutARingOrWhenTheKernelRefusesAccept4Serves) {
  for (bool refused : {false, true}) {
    SCOPED_TRACE(refused ? "accept flags refused" : "--io-uring off");
    EventLoop::SetIoUringMode(refused ? IoUringMode::kAuto : IoUringMode::kOff, nullptr);
    EventLoop::RefuseRingAcceptsForTesting(refused);
    {
      EventLoop loop;
      const bool ring = loop.batching_sends();
      if (refused && !ring) {
        continue;  // no io_uring here: nothing to refuse
      }
      EXPECT_EQ(ring, refused);
      TestListener listener;
      Acceptor acceptor(&loop, listener.fd);
      ASSERT_TRUE(loop.Add(listener.fd, EPOLLIN | EPOLLET, &acceptor));
      std::vector<uint16_t> ports = {listener.Connect(), listener.Connect()};
      RunUntil(&loop, [&] { return acceptor.fds.size() == 2; });
      EXPECT_EQ(acceptor.ports, ports);
      EXPECT_EQ(acceptor.last_errno, EAGAIN);
      EXPECT_GE(loop.direct_accepts(), 2u);
      // Refused once (the kernel's -EINVAL): no accept tried through the ring
      // again.
      const uint64_t ring_accepts = loop.ring_accepts();
      EXPECT_EQ(ring_accepts > 0, refused);
      ports.push_back(listener.Connect());
      RunUntil(&loop, [&] { return acceptor.fds.size() == 3; });
      EXPECT_EQ(acceptor.ports, ports);
      EXPECT_EQ(loop.ring_accepts(), ring_accepts);
    }
  }
  EventLoop::RefuseRingAcceptsForTesting(false);
  EventLoop::SetIoUringMode(IoUringMode::kAuto, nullptr);
}

}  // namespace
}  // namespace kwd::net
