#include "dataplane/net/event_loop.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace kwd::net {
namespace {

struct Recorder {
  EventLoop* loop;
  std::vector<int>* order;
  int id;
  Timer timer{this, [](void* self) {
                auto* r = static_cast<Recorder*>(self);
                r->order->push_back(r->id);
                if (r->order->size() == 3) {
                  r->loop->Stop();
                }
              }};
};

TEST(EventLoopTest, TimersFireInDeadlineOrder) {
  EventLoop loop;
  std::vector<int> order;
  Recorder a{&loop, &order, 1};
  Recorder b{&loop, &order, 2};
  Recorder c{&loop, &order, 3};
  loop.Schedule(&c.timer, 60);
  loop.Schedule(&a.timer, 0);
  loop.Schedule(&b.timer, 30);
  int64_t start = MonotonicMs();
  loop.Run();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(MonotonicMs() - start, 60);
}

TEST(EventLoopTest, CancelledAndRearmedTimers) {
  EventLoop loop;
  std::vector<int> order;
  Recorder a{&loop, &order, 1};
  Recorder b{&loop, &order, 2};
  Recorder c{&loop, &order, 3};
  Recorder stopper{&loop, &order, 4};
  loop.Schedule(&a.timer, 10);
  loop.Cancel(&a.timer);
  EXPECT_FALSE(a.timer.armed());
  loop.Schedule(&b.timer, 10);
  loop.Schedule(&b.timer, 40);  // re-armed later
  loop.Schedule(&c.timer, 20);
  loop.Schedule(&stopper.timer, 50);
  loop.Run();
  EXPECT_EQ(order, (std::vector<int>{3, 2, 4}));
}

TEST(EventLoopTest, TimerBeyondOneWheelTurnWaitsForItsDeadline) {
  EventLoop loop;
  std::vector<int> order;
  Recorder far{&loop, &order, 1};
  loop.Schedule(&far.timer, 10240 + 30);  // lands in a slot that comes round early
  Recorder near{&loop, &order, 2};
  loop.Schedule(&near.timer, 20);
  loop.Post([&] {});
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    loop.Stop();
  });
  loop.Run();
  stopper.join();
  EXPECT_EQ(order, (std::vector<int>{2}));
  EXPECT_TRUE(far.timer.armed());
}

// Regression: a timer armed in the middle of a tick (from an I/O handler)
// must fire even when the loop reaches that tick before its deadline.
TEST(EventLoopTest, TimersArmedAtAnyPhaseOfATickFire) {
  EventLoop loop;
  std::vector<int> unused;
  struct Periodic {
    EventLoop* loop;
    Timer timer{this, [](void* self) {
                  auto* p = static_cast<Periodic*>(self);
                  p->loop->Schedule(&p->timer, 7);
                }};
  } periodic{&loop};
  loop.Schedule(&periodic.timer, 7);
  std::thread runner([&] { loop.Run(); });
  int missed = 0;
  for (int i = 0; i < 40; ++i) {
    std::atomic<int> fired{0};
    struct Once {
      std::atomic<int>* fired;
      Timer timer{this, [](void* self) { static_cast<Once*>(self)->fired->fetch_add(1); }};
    } once{&fired};
    loop.Post([&] {
      loop.UpdateTime();
      loop.Schedule(&once.timer, 23);
    });
    // A lost timer never fires; a loaded machine may run the loop late, so
    // wait (bounded) for the firing rather than a fixed time.
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + i % 7));
    for (int waited = 0; fired.load() == 0 && waited < 2000; ++waited) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::atomic<bool> checked{false};
    loop.Post([&] {
      loop.Cancel(&once.timer);
      checked = true;
    });
    while (!checked) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    missed += fired.load() == 1 ? 0 : 1;
  }
  loop.Stop();
  runner.join();
  EXPECT_EQ(missed, 0);
}

// An idle loop sleeps until its next timer is due, also past its longest
// sleep (1 s), instead of waking every 10 ms tick: a proxy with nothing to do
// costs no CPU.
TEST(EventLoopTest, IdleLoopSleepsUntilItsNextTimer) {
  EventLoop loop;
  struct Stamped {
    int64_t* at;
    Timer timer{this, [](void* self) { *static_cast<Stamped*>(self)->at = MonotonicMs(); }};
  };
  int64_t first_at = 0;
  int64_t last_at = 0;
  Stamped first{&first_at};
  struct Last {
    EventLoop* loop;
    int64_t* at;
    Timer timer{this, [](void* self) {
                  auto* l = static_cast<Last*>(self);
                  *l->at = MonotonicMs();
                  l->loop->Stop();
                }};
  } last{&loop, &last_at};
  loop.UpdateTime();
  const int64_t start = MonotonicMs();
  loop.Schedule(&first.timer, 300);
  loop.Schedule(&last.timer, 1300);
  rusage before{};
  getrusage(RUSAGE_THREAD, &before);
  loop.Run();
  rusage after{};
  getrusage(RUSAGE_THREAD, &after);
  EXPECT_GE(first_at - start, 300);
  EXPECT_LT(first_at - start, 1000);
  EXPECT_GE(last_at - start, 1300);
  EXPECT_LT(last_at - start, 2300);
  // Waking every tick would be about 130 sleeps; until each timer (and once
  // at the longest sleep) about 3.
  EXPECT_LT(after.ru_nvcsw - before.ru_nvcsw, 15);
}

// While events keep coming (a Post every 9 ms here), the loop waits until
// the end of the next tick, not a flat 10 ms from whenever it looked: a
// timer fires within its tick (at most about 10 ms after its deadline), not
// up to two ticks late (about a quarter of them were, before).
TEST(EventLoopTest, TimersStayWithinATickWhileEventsKeepComing) {
  EventLoop loop;
  struct Measured {
    int64_t deadline = 0;
    std::atomic<int64_t> late{-1};
    Timer timer{this, [](void* self) {
                  auto* m = static_cast<Measured*>(self);
                  m->late = MonotonicMs() - m->deadline;
                }};
  };
  constexpr int kTimers = 150;
  std::vector<std::unique_ptr<Measured>> timers;
  for (int i = 0; i < kTimers; ++i) {
    timers.push_back(std::make_unique<Measured>());
  }
  std::thread runner([&] { loop.Run(); });
  for (int i = 0; i < kTimers; ++i) {
    Measured* m = timers[i].get();
    const int64_t delay = 1 + (i * 7) % 50;
    loop.Post([&loop, m, delay] {
      loop.UpdateTime();
      m->deadline = loop.now_ms() + delay;
      loop.Schedule(&m->timer, delay);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(9));
  }
  for (int waited = 0; waited < 2000; ++waited) {
    if (std::all_of(timers.begin(), timers.end(), [](const auto& m) { return m->late >= 0; })) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  loop.Stop();
  runner.join();
  int fired = 0;
  int over_a_tick = 0;
  for (const auto& m : timers) {
    fired += m->late >= 0 ? 1 : 0;
    over_a_tick += m->late > 11 ? 1 : 0;
  }
  EXPECT_EQ(fired, kTimers);
  // A loaded machine may run the loop late now and then; two ticks late for
  // a quarter of the timers is what the flat wait gave.
  EXPECT_LE(over_a_tick, kTimers / 10) << over_a_tick << " of " << kTimers;
}

TEST(EventLoopTest, PostRunsOnTheLoopThread) {
  EventLoop loop;
  std::thread::id ran_on;
  std::thread poster([&] {
    loop.Post([&] {
      ran_on = std::this_thread::get_id();
      loop.Stop();
    });
  });
  loop.Run();
  poster.join();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

struct Reader : IoHandler {
  EventLoop* loop;
  int fd;
  std::string got;
  void OnIo(uint32_t events) override {
    char buf[64];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      got.append(buf, n);
    }
    if (got.size() >= 5) {
      loop->Stop();
    }
  }
};

TEST(EventLoopTest, DeliversReadinessEdgeTriggered) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  EventLoop loop;
  Reader reader;
  reader.loop = &loop;
  reader.fd = fds[0];
  ASSERT_TRUE(loop.Add(fds[0], EPOLLIN | EPOLLET, &reader));
  std::thread writer([&] {
    ASSERT_EQ(write(fds[1], "hel", 3), 3);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(write(fds[1], "lo", 2), 2);
  });
  loop.Run();
  writer.join();
  EXPECT_EQ(reader.got, "hello");
  close(fds[0]);
  close(fds[1]);
}

// Both sockets are readable before the loop runs, so their events come in one
// batch: each defers the same flush, which runs once, after both.
struct Deferring final : IoHandler {
  EventLoop* loop = nullptr;
  Deferred* flush = nullptr;
  std::vector<std::string>* log = nullptr;
  void OnIo(uint32_t /*events*/) override {
    log->push_back("io");
    loop->Defer(flush);
    loop->Defer(flush);  // already queued: no second run
  }
};

TEST(EventLoopTest, DeferredRunsOnceAfterTheBatch) {
  int a[2];
  int b[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, a), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, b), 0);
  ASSERT_EQ(write(a[1], "x", 1), 1);
  ASSERT_EQ(write(b[1], "y", 1), 1);
  EventLoop loop;
  std::vector<std::string> log;
  struct Flush {
    EventLoop* loop;
    std::vector<std::string>* log;
  } state{&loop, &log};
  Deferred flush(&state, [](void* self) {
    auto* f = static_cast<Flush*>(self);
    f->log->push_back("flush");
    f->loop->Stop();
  });
  // Deferred and destroyed before the batch ends: never runs.
  auto dropped = std::make_unique<Deferred>(
      &state, [](void* self) { static_cast<Flush*>(self)->log->push_back("dropped"); });
  loop.Defer(dropped.get());
  EXPECT_TRUE(dropped->queued());
  dropped.reset();
  Deferring ha;
  Deferring hb;
  for (Deferring* h : {&ha, &hb}) {
    h->loop = &loop;
    h->flush = &flush;
    h->log = &log;
  }
  ASSERT_TRUE(loop.Add(a[0], EPOLLIN | EPOLLET, &ha));
  ASSERT_TRUE(loop.Add(b[0], EPOLLIN | EPOLLET, &hb));
  loop.Run();
  EXPECT_EQ(log, (std::vector<std::string>{"io", "io", "flush"}));
  EXPECT_FALSE(flush.queued());
  for (int fd : {a[0], a[1], b[0], b[1]}) {
    close(fd);
  }
}

// An owner that stops with work left and defers itself again: with Defer it
// would run again in the same batch (up to RunDeferred's bound), while
// DeferToNextTurn makes it wait for the next iteration, whose events (and
// timers) come first. Each run writes a byte to a socket: its event is
// handled before the next run.
TEST(EventLoopTest, DeferToNextTurnLetsTheNextEventsInFirst) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  EventLoop loop;
  std::vector<std::string> log;
  struct Busy {
    EventLoop* loop;
    std::vector<std::string>* log;
    int fd;
    int runs = 0;
    Deferred again{this, [](void* self) {
                     auto* b = static_cast<Busy*>(self);
                     b->log->push_back("busy");
                     ASSERT_EQ(write(b->fd, "x", 1), 1);
                     if (++b->runs == 4) {
                       b->loop->Stop();
                       return;
                     }
                     b->loop->DeferToNextTurn(&b->again);
                     b->loop->Defer(&b->again);  // queued for the next turn: stays so
                   }};
  } busy{&loop, &log, fds[1]};
  struct Io final : IoHandler {
    std::vector<std::string>* log;
    int fd;
    void OnIo(uint32_t /*events*/) override {
      char c;
      while (read(fd, &c, 1) == 1) {
        log->push_back("io");
      }
    }
  } io;
  io.log = &log;
  io.fd = fds[0];
  ASSERT_TRUE(loop.Add(fds[0], EPOLLIN | EPOLLET, &io));
  loop.DeferToNextTurn(&busy.again);
  EXPECT_TRUE(busy.again.queued());
  loop.Run();
  EXPECT_EQ(log, (std::vector<std::string>{"busy", "io", "busy", "io", "busy", "io", "busy"}));
  // Cancelled from the next turn's list, as from the current one.
  loop.DeferToNextTurn(&busy.again);
  loop.CancelDeferred(&busy.again);
  EXPECT_FALSE(busy.again.queued());
  close(fds[0]);
  close(fds[1]);
}

// Resident KiB of this process (/proc/self/statm).
long ResidentKiB() {
  long pages = 0;
  long resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) {
      resident = 0;
    }
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// Blocks freed between blocks that stay keep their pages resident until the
// loop's trim, which runs once for any number of requests in its delay.
TEST(EventLoopTest, TrimHeapSoonGivesFreedPagesBackOnce) {
  constexpr int kBlocks = 2000;
  constexpr size_t kBlockBytes = 16 * 1024;
  std::vector<char*> large(kBlocks);
  std::vector<char*> small(kBlocks);
  for (int i = 0; i < kBlocks; ++i) {
    large[i] = static_cast<char*>(std::malloc(kBlockBytes));
    small[i] = static_cast<char*>(std::malloc(64));
    std::fill(large[i], large[i] + kBlockBytes, 'x');  // resident
    small[i][0] = 'y';
  }
  for (char* p : large) {
    std::free(p);
  }
  const long before = ResidentKiB();
  EventLoop loop;
  loop.TrimHeapSoon();
  loop.TrimHeapSoon();  // within the delay: the same trim
  std::atomic<bool> give_up{false};
  std::thread deadline([&] {
    for (int i = 0; i < 50 && !give_up.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    loop.Stop();
  });
  const int64_t start = MonotonicMs();
  struct Watch {
    EventLoop* loop;
    Timer timer{this, [](void* self) {
                  auto* w = static_cast<Watch*>(self);
                  if (w->loop->heap_trims() > 0) {
                    w->loop->Stop();
                  } else {
                    w->loop->Schedule(&w->timer, 20);
                  }
                }};
  } watch{&loop};
  loop.Schedule(&watch.timer, 20);
  loop.Run();
  give_up = true;
  deadline.join();
  const long after = ResidentKiB();
  EXPECT_EQ(loop.heap_trims(), 1u);
  EXPECT_GE(MonotonicMs() - start, EventLoop::kHeapTrimDelayMs - 10);
  // 31 MiB were freed; most of it goes back.
  EXPECT_LT(after, before - 20 * 1024) << "before " << before << " KiB, after " << after;
  for (char* p : small) {
    std::free(p);
  }
}

}  // namespace
}  // namespace kwd::net
