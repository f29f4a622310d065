#pragma once

// One event loop per worker thread: epoll (edge-triggered) plus a hashed
// timing wheel. Everything except Stop() and Post() runs on the loop's thread.

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace kwd::net {

class IoHandler {
 public:
  virtual void OnIo(uint32_t events) = 0;

 protected:
  ~IoHandler() = default;
};

class EventLoop;

// Objects closed while an event batch runs are destroyed after the batch, so
// a later event of the same batch never touches freed memory.
class Deletable {
 public:
  virtual ~Deletable() = default;
};

// A timer embedded in its owner. Scheduling an armed timer re-arms it.
class Timer {
 public:
  using Callback = void (*)(void* owner);
  Timer(void* owner, Callback callback) : owner_(owner), callback_(callback) {}
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  bool armed() const { return loop_ != nullptr; }
  int64_t deadline_ms() const { return deadline_ms_; }

 private:
  friend class EventLoop;
  void* owner_;
  Callback callback_;
  EventLoop* loop_ = nullptr;
  int64_t deadline_ms_ = 0;
  Timer* prev_ = nullptr;
  Timer* next_ = nullptr;
  size_t slot_ = 0;
};

// A callback embedded in its owner that runs once at the end of the current
// batch of events (after the I/O events, and again after the timers), before
// closed objects are destroyed: a connection that many events of one batch
// touch (an HTTP/2 connection whose streams' upstreams answered) writes its
// output once. Deferring a queued callback again does nothing.
class Deferred {
 public:
  using Callback = void (*)(void* owner);
  Deferred(void* owner, Callback callback) : owner_(owner), callback_(callback) {}
  ~Deferred();
  Deferred(const Deferred&) = delete;
  Deferred& operator=(const Deferred&) = delete;
  bool queued() const { return loop_ != nullptr; }

 private:
  friend class EventLoop;
  void* owner_;
  Callback callback_;
  EventLoop* loop_ = nullptr;
  Deferred* prev_ = nullptr;
  Deferred* next_ = nullptr;
};

// Monotonic milliseconds.
int64_t MonotonicMs();

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  bool Add(int fd, uint32_t events, IoHandler* handler);
  bool Modify(int fd, uint32_t events, IoHandler* handler);
  void Remove(int fd);

  void Schedule(Timer* timer, int64_t delay_ms);
  void Cancel(Timer* timer);

  // Runs until Stop(). Each iteration waits for I/O or the next tick.
  void Run();
  // Thread-safe.
  void Stop();
  // Runs `fn` on the loop's thread soon. Thread-safe.
  void Post(std::function<void()> fn);

  // Runs `deferred` at the end of the current batch (or of the next one, when
  // called outside a batch).
  void Defer(Deferred* deferred);
  void CancelDeferred(Deferred* deferred);

  void DeleteLater(Deletable* object) { graveyard_.push_back(object); }

  // Time cached at the start of the current iteration.
  int64_t now_ms() const { return now_ms_; }
  void UpdateTime() { now_ms_ = MonotonicMs(); }

 private:
  static constexpr size_t kWheelSlots = 1024;
  static constexpr int64_t kTickMs = 10;

  void RunTimers();
  void RunDeferred();
  void DrainPosted();
  void Unlink(Timer* timer);

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  int64_t now_ms_ = 0;
  int64_t wheel_time_ms_ = 0;  // the tick processed last
  std::vector<Timer*> wheel_;  // heads of intrusive lists
  size_t armed_timers_ = 0;
  std::vector<Deletable*> graveyard_;
  Deferred* deferred_head_ = nullptr;  // FIFO
  Deferred* deferred_tail_ = nullptr;
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
};

}  // namespace kwd::net
