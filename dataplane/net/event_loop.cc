#include "dataplane/net/event_loop.h"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

namespace kwd::net {

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

Timer::~Timer() {
  if (loop_ != nullptr) {
    loop_->Cancel(this);
  }
}

Deferred::~Deferred() {
  if (loop_ != nullptr) {
    loop_->CancelDeferred(this);
  }
}

namespace {
// The wake-up eventfd is registered with this sentinel instead of a handler.
IoHandler* const kWakeHandler = nullptr;
}  // namespace

EventLoop::EventLoop() : wheel_(kWheelSlots, nullptr) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    std::abort();  // out of file descriptors at start-up
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = kWakeHandler;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  now_ms_ = MonotonicMs();
  wheel_time_ms_ = now_ms_ - now_ms_ % kTickMs;
}

EventLoop::~EventLoop() {
  for (Timer*& head : wheel_) {
    while (head != nullptr) {
      Timer* t = head;
      head = t->next_;
      t->loop_ = nullptr;
      t->prev_ = t->next_ = nullptr;
    }
  }
  while (deferred_head_ != nullptr) {
    CancelDeferred(deferred_head_);
  }
  close(wake_fd_);
  close(epoll_fd_);
}

bool EventLoop::Add(int fd, uint32_t events, IoHandler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

bool EventLoop::Modify(int fd, uint32_t events, IoHandler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  return epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void EventLoop::Remove(int fd) { epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr); }

void EventLoop::Unlink(Timer* timer) {
  if (timer->prev_ != nullptr) {
    timer->prev_->next_ = timer->next_;
  } else {
    wheel_[timer->slot_] = timer->next_;
  }
  if (timer->next_ != nullptr) {
    timer->next_->prev_ = timer->prev_;
  }
  timer->prev_ = timer->next_ = nullptr;
  timer->loop_ = nullptr;
  --armed_timers_;
}

void EventLoop::Schedule(Timer* timer, int64_t delay_ms) {
  if (timer->loop_ != nullptr) {
    Unlink(timer);
  }
  if (delay_ms < 0) {
    delay_ms = 0;
  }
  timer->deadline_ms_ = now_ms_ + delay_ms;
  // wheel_time_ms_ is the first tick not processed yet, so a timer never lands
  // in a tick that was processed (or is being processed) already.
  int64_t tick = std::max(timer->deadline_ms_, wheel_time_ms_) / kTickMs;
  timer->slot_ = static_cast<size_t>(tick) % kWheelSlots;
  timer->loop_ = this;
  timer->prev_ = nullptr;
  timer->next_ = wheel_[timer->slot_];
  if (timer->next_ != nullptr) {
    timer->next_->prev_ = timer;
  }
  wheel_[timer->slot_] = timer;
  ++armed_timers_;
}

void EventLoop::Cancel(Timer* timer) {
  if (timer->loop_ == this) {
    Unlink(timer);
  }
}

void EventLoop::Defer(Deferred* deferred) {
  if (deferred->loop_ != nullptr) {
    return;
  }
  deferred->loop_ = this;
  deferred->next_ = nullptr;
  deferred->prev_ = deferred_tail_;
  if (deferred_tail_ != nullptr) {
    deferred_tail_->next_ = deferred;
  } else {
    deferred_head_ = deferred;
  }
  deferred_tail_ = deferred;
}

void EventLoop::CancelDeferred(Deferred* deferred) {
  if (deferred->loop_ != this) {
    return;
  }
  if (deferred->prev_ != nullptr) {
    deferred->prev_->next_ = deferred->next_;
  } else {
    deferred_head_ = deferred->next_;
  }
  if (deferred->next_ != nullptr) {
    deferred->next_->prev_ = deferred->prev_;
  } else {
    deferred_tail_ = deferred->prev_;
  }
  deferred->prev_ = deferred->next_ = nullptr;
  deferred->loop_ = nullptr;
}

void EventLoop::RunDeferred() {
  // Callbacks may defer others (or themselves again): those run too, up to a
  // bound; what is left runs after the next batch, which then does not wait.
  for (int i = 0; i < 100'000 && deferred_head_ != nullptr; ++i) {
    Deferred* d = deferred_head_;
    CancelDeferred(d);
    d->callback_(d->owner_);
  }
}

void EventLoop::RunTimers() {
  // A tick is processed once every deadline in it has passed.
  while (wheel_time_ms_ + kTickMs - 1 <= now_ms_) {
    int64_t tick_start = wheel_time_ms_;
    wheel_time_ms_ += kTickMs;
    if (armed_timers_ == 0) {
      wheel_time_ms_ = now_ms_ - now_ms_ % kTickMs;
      return;
    }
    size_t slot = static_cast<size_t>(tick_start / kTickMs) % kWheelSlots;
    Timer* t = wheel_[slot];
    while (t != nullptr) {
      Timer* next = t->next_;
      // Timers a whole wheel turn (or more) ahead share the slot: they wait.
      if (t->deadline_ms_ <= now_ms_) {
        Unlink(t);
        // The callback may re-arm or cancel any timer, `next` included, so
        // the scan restarts from the slot's head. Re-armed timers land in
        // later ticks and are not met again here.
        t->callback_(t->owner_);
        next = wheel_[slot];
        while (next != nullptr && next->deadline_ms_ > now_ms_) {
          next = next->next_;
        }
      }
      t = next;
    }
  }
}

void EventLoop::DrainPosted() {
  uint64_t value;
  ssize_t ignored = read(wake_fd_, &value, sizeof value);
  (void)ignored;
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard lock(posted_mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) {
    fn();
  }
}

void EventLoop::Run() {
  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  while (!stop_.load(std::memory_order_acquire)) {
    int timeout = armed_timers_ > 0 ? static_cast<int>(kTickMs) : 1000;
    if (deferred_head_ != nullptr) {
      timeout = 0;  // callbacks left over from the last batch
    }
    int n = epoll_wait(epoll_fd_, events, kMaxEvents, timeout);
    now_ms_ = MonotonicMs();
    for (int i = 0; i < n; ++i) {
      auto* handler = static_cast<IoHandler*>(events[i].data.ptr);
      if (handler == kWakeHandler) {
        DrainPosted();
      } else {
        handler->OnIo(events[i].events);
      }
    }
    RunDeferred();
    RunTimers();
    RunDeferred();
    for (size_t i = 0; i < graveyard_.size(); ++i) {
      delete graveyard_[i];
    }
    graveyard_.clear();
  }
}

void EventLoop::Stop() {
  stop_.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

void EventLoop::Post(std::function<void()> fn) {
  {
    std::lock_guard lock(posted_mu_);
    posted_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

}  // namespace kwd::net
