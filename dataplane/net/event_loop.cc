#include "dataplane/net/event_loop.h"

#include <liburing.h>
#include <malloc.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

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

BatchedSend::~BatchedSend() {
  if (loop_ != nullptr) {
    loop_->CancelSend(this);
  }
}

BatchedRecv::~BatchedRecv() {
  if (loop_ != nullptr) {
    loop_->CancelRecv(this);
  }
}

void BatchedRecv::Finish() {
  if (loop_ != nullptr) {
    loop_->CancelRecv(this);
  }
}

void BatchedAccept::Discard() {
  for (unsigned i = next_; i < count_; ++i) {
    if (results_[i] >= 0) {
      close(results_[i]);
    }
  }
  next_ = count_ = 0;
  emptied_ = false;
}

namespace {
std::atomic<IoUringMode> g_uring_mode{IoUringMode::kAuto};
std::atomic<bool> g_refuse_ring_accepts{false};
// Accept flags in the SQE's ioprio (linux/io_uring.h of 6.10; liburing 2.3
// predates them): DONTWAIT completes an accept on an empty listener at once
// with -EAGAIN instead of parking it until a connection comes (which the
// listener's O_NONBLOCK does not do).
constexpr uint16_t kAcceptDontWait = 1U << 1;
constexpr uint16_t kAcceptUnknownFlagForTesting = 1U << 15;
std::atomic<void (*)(int)> g_uring_unavailable{nullptr};
std::atomic<bool> g_uring_reported{false};
std::atomic<int> g_uring_fail_for_testing{0};
constexpr unsigned kRingEntries = 256;

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
  while (next_turn_head_ != nullptr) {
    CancelDeferred(next_turn_head_);
  }
  while (sends_head_ != nullptr) {
    CancelSend(sends_head_);
  }
  for (int fd : closes_) {
    close(fd);
  }
  while (recvs_head_ != nullptr) {
    CancelRecv(recvs_head_);
  }
  if (recv_arena_ != nullptr) {
    munmap(recv_arena_, kRingEntries * kRecvSlotBytes);
  }
  if (ring_ != nullptr) {
    io_uring_queue_exit(ring_);
    delete ring_;
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

template <class Node>
void EventLoop::Append(Node*& head, Node*& tail, Node* node) {
  node->loop_ = this;
  node->next_ = nullptr;
  node->prev_ = tail;
  if (tail != nullptr) {
    tail->next_ = node;
  } else {
    head = node;
  }
  tail = node;
}

template <class Node>
void EventLoop::Detach(Node*& head, Node*& tail, Node* node) {
  if (node->prev_ != nullptr) {
    node->prev_->next_ = node->next_;
  } else {
    head = node->next_;
  }
  if (node->next_ != nullptr) {
    node->next_->prev_ = node->prev_;
  } else {
    tail = node->prev_;
  }
  node->prev_ = node->next_ = nullptr;
  node->loop_ = nullptr;
}

void EventLoop::Defer(Deferred* deferred) {
  if (deferred->loop_ == nullptr) {
    Append(deferred_head_, deferred_tail_, deferred);
  }
}

void EventLoop::DeferToNextTurn(Deferred* deferred) {
  if (deferred->loop_ == nullptr) {
    Append(next_turn_head_, next_turn_tail_, deferred);
    deferred->next_turn_ = true;
  }
}

void EventLoop::CancelDeferred(Deferred* deferred) {
  if (deferred->loop_ != this) {
    return;
  }
  if (deferred->next_turn_) {
    Detach(next_turn_head_, next_turn_tail_, deferred);
    deferred->next_turn_ = false;
  } else {
    Detach(deferred_head_, deferred_tail_, deferred);
  }
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

void EventLoop::SetIoUringMode(IoUringMode mode, void (*on_unavailable)(int error)) {
  g_uring_mode.store(mode);
  g_uring_unavailable.store(on_unavailable);
}

void EventLoop::FailIoUringSetupForTesting(int error) { g_uring_fail_for_testing.store(error); }

void EventLoop::SetUpUring() {
  uring_state_ = UringState::kOff;
  if (g_uring_mode.load() == IoUringMode::kOff) {
    return;
  }
  int error = g_uring_fail_for_testing.load();
  if (error == 0) {
    auto* ring = new ::io_uring{};
    // Only this thread submits, and completions are reaped right after each
    // submit, in the same kernel entry: the kernel need not interrupt the
    // thread for task work (a linked close after its send), it runs it when
    // the thread waits for the completions (DEFER_TASKRUN).
    int rc = io_uring_queue_init(kRingEntries, ring,
                                 IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
    if (rc == -EINVAL) {  // kernel before 6.1
      rc = io_uring_queue_init(kRingEntries, ring,
                               IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN);
    }
    if (rc == -EINVAL) {
      rc = io_uring_queue_init(kRingEntries, ring, 0);  // kernel before 6.0
    }
    if (rc == 0) {
      ring_ = ring;
      uring_state_ = UringState::kOn;
      return;
    }
    delete ring;
    error = -rc;
  }
  if (!g_uring_reported.exchange(true)) {
    if (auto* report = g_uring_unavailable.load(); report != nullptr) {
      report(error);
    }
  }
}

unsigned EventLoop::ring_setup_flags() const { return ring_ != nullptr ? ring_->flags : 0; }

void EventLoop::TrimHeapSoon() {
  if (!heap_trim_timer_.armed()) {
    Schedule(&heap_trim_timer_, kHeapTrimDelayMs);
  }
}

void EventLoop::OnHeapTrim(void* self) {
  auto* loop = static_cast<EventLoop*>(self);
  ::malloc_trim(0);
  ++loop->heap_trims_;
}

void EventLoop::QueueSend(BatchedSend* send, int fd, const char* data, size_t size) {
  send->fd_ = fd;
  send->data_ = data;
  send->size_ = size;
  if (send->loop_ == nullptr) {
    Append(sends_head_, sends_tail_, send);
  }
}

void EventLoop::CancelSend(BatchedSend* send) {
  if (send->loop_ == this) {
    Detach(sends_head_, sends_tail_, send);
    if (send->close_fd_ >= 0) {
      closes_.push_back(send->close_fd_);  // the close still goes
      send->close_fd_ = -1;
    }
  }
}

unsigned EventLoop::SubmitAndReap(unsigned count, int* results, bool* more) {
  for (unsigned i = 0; i < count; ++i) {
    results[i] = -ECANCELED;
  }
  ++ring_submits_;
  // Waits for all `count` completions: an op the kernel punted to a worker
  // thread is never left pointing into memory its owner may free.
  int rc;
  do {
    rc = io_uring_submit_and_wait(ring_, count);
  } while (rc == -EINTR);
  unsigned submitted = rc > 0 ? static_cast<unsigned>(rc) : 0;
  if (submitted < count) {
    // Entries the kernel did not take stay in the submission queue: the
    // ring is never entered again (direct syscalls from now on), so they
    // never run once their owners' bytes are gone.
    uring_state_ = UringState::kOff;
  }
  unsigned reaped = 0;
  for (int spins = 0; reaped < submitted; ++spins) {
    io_uring_cqe* cqe;
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(ring_, head, cqe) {
      uint64_t index = io_uring_cqe_get_data64(cqe);
      if (index < count) {
        results[index] = cqe->res;
        if (more != nullptr) {
          more[index] = (cqe->flags & IORING_CQE_F_SOCK_NONEMPTY) != 0;
        }
      }
      ++seen;
    }
    io_uring_cq_advance(ring_, seen);
    reaped += seen;
    if (reaped < submitted) {
      if (spins > 1'000'000) {
        std::abort();  // ops in flight into memory about to be reused
      }
      io_uring_wait_cqe_nr(ring_, &cqe, submitted - reaped);
    }
  }
  return submitted;
}

void EventLoop::QueueClose(int fd, BatchedSend* after) {
  if (after != nullptr && after->loop_ == this) {
    after->close_fd_ = fd;
  } else {
    closes_.push_back(fd);
  }
}

namespace {
// A socket whose last send did not go whole: the reset says so (a FIN would
// end a close-delimited body as complete).
void CloseWithReset(int fd) {
  linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  close(fd);
}
}  // namespace

void EventLoop::FlushSends() {
  // Callbacks may queue sends again (a transport whose owner writes more on
  // the result): those go in the next round, up to a bound.
  for (int round = 0; round < 1000 && (sends_head_ != nullptr || !closes_.empty()); ++round) {
    BatchedSend* batch[kRingEntries];  // null for a close
    int close_fds[kRingEntries];       // -1 for a send
    bool linked[kRingEntries];         // a close after its socket's send
    unsigned count = 0;
    while (!closes_.empty() && uring_state_ == UringState::kOn) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring_);
      if (sqe == nullptr) {
        break;
      }
      io_uring_prep_close(sqe, closes_.back());
      io_uring_sqe_set_data64(sqe, count);
      batch[count] = nullptr;
      linked[count] = false;
      close_fds[count++] = closes_.back();
      closes_.pop_back();
    }
    while (sends_head_ != nullptr && uring_state_ == UringState::kOn) {
      BatchedSend* send = sends_head_;
      const int close_fd = send->close_fd_;
      if (io_uring_sq_space_left(ring_) < (close_fd >= 0 ? 2u : 1u)) {
        break;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(ring_);
      send->close_fd_ = -1;
      CancelSend(send);
      // MSG_DONTWAIT: a socket without room completes at once with -EAGAIN
      // (the kernel does not park the send until there is room), so every
      // send has completed when the submit returns. MSG_MORE on a send with
      // a close after it: the kernel holds the last bytes back (a send that
      // runs out of room still pushes what it took) and the close's FIN
      // leaves with them, one segment instead of two and no separate ACK
      // from the peer.
      io_uring_prep_send(sqe, send->fd_, send->data_, send->size_,
                         MSG_DONTWAIT | MSG_NOSIGNAL | (close_fd >= 0 ? MSG_MORE : 0));
      io_uring_sqe_set_data64(sqe, count);
      batch[count] = send;
      linked[count] = false;
      close_fds[count++] = -1;
      if (close_fd >= 0) {
        // The close runs after the send, and only when it succeeded (a failed
        // link member cancels the rest of the chain).
        sqe->flags |= IOSQE_IO_LINK;
        io_uring_sqe* close_sqe = io_uring_get_sqe(ring_);
        io_uring_prep_close(close_sqe, close_fd);
        io_uring_sqe_set_data64(close_sqe, count);
        batch[count] = nullptr;
        linked[count] = true;
        close_fds[count++] = close_fd;
      }
    }
    if (count == 0) {
      // No ring (any more): a send with a close after it goes directly first
      // (its owner sends no more: nothing queues it again), then the closes.
      for (BatchedSend* send = sends_head_; send != nullptr;) {
        BatchedSend* next = send->next_;
        if (send->close_fd_ >= 0) {
          CancelSend(send);  // its close joins closes_
          send->done_(send->owner_, -ECANCELED);
        }
        send = next;
      }
      for (int fd : closes_) {
        close(fd);
      }
      closes_.clear();
      return;
    }
    int results[kRingEntries];
    const unsigned submitted = SubmitAndReap(count, results);
    for (unsigned i = 0; i < count; ++i) {
      if (BatchedSend* send = batch[i]; send != nullptr) {
        // -ECANCELED when the submit itself failed: the owner retries with a
        // direct send.
        send->done_(send->owner_, results[i]);
      }
    }
    for (unsigned i = 0; i < count; ++i) {
      if (batch[i] != nullptr || results[i] != -ECANCELED) {
        continue;  // a send, or a close that ran (another error: no descriptor to close)
      }
      if (i >= submitted || !linked[i]) {
        close(close_fds[i]);  // never reached the kernel (its send went directly)
      } else {
        CloseWithReset(close_fds[i]);  // its send failed
      }
    }
  }
}

void EventLoop::CancelRecv(BatchedRecv* recv) {
  if (recv->loop_ == this) {
    Detach(recvs_head_, recvs_tail_, recv);
  }
}

namespace {
// Listeners whose first round of accepts joins one read-ahead.
constexpr size_t kAheadAccepts = 8;
}  // namespace

void EventLoop::ReadAhead(const epoll_event* events, int n) {
  BatchedRecv* wanted[kRingEntries];
  unsigned count = 0;
  BatchedAccept* accepts[kAheadAccepts];
  unsigned n_accepts = 0;
  for (int i = 0; i < n && count < kRingEntries; ++i) {
    auto* handler = static_cast<IoHandler*>(events[i].data.ptr);
    if (handler == kWakeHandler || (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) == 0) {
      continue;
    }
    if (BatchedAccept* accept = handler->AcceptAhead(); accept != nullptr) {
      if (ring_accepts_on() && !accept->pending() && n_accepts < kAheadAccepts) {
        accepts[n_accepts++] = accept;
      }
      continue;
    }
    // The handler's transport sets the ring up on first use: the state is
    // checked after.
    BatchedRecv* recv = handler->ReadAhead();
    if (recv != nullptr && uring_state_ == UringState::kOn) {
      wanted[count++] = recv;
    }
  }
  SubmitRecvs(wanted, count, accepts, n_accepts);
}

void EventLoop::ReadAheadNow(BatchedRecv* const* recvs, size_t count) {
  if (count > 0 && batching_sends()) {
    SubmitRecvs(recvs, count);
  }
}

void EventLoop::SubmitRecvs(BatchedRecv* const* recvs, size_t n, BatchedAccept* const* accepts,
                            size_t n_accepts) {
  if (n > 0 && recv_arena_ == nullptr && recv_slots_used_ < kRingEntries) {
    // Address space only: a page is backed once a receive writes to it,
    // and slots are used from the first, so the pages are as many as the
    // largest number of read-aheads of one iteration needed.
    void* arena = mmap(nullptr, kRingEntries * kRecvSlotBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena != MAP_FAILED) {
      recv_arena_ = static_cast<char*>(arena);
    }
  }
  BatchedRecv* batch[kRingEntries];
  unsigned count = 0;
  // Slots of earlier read-aheads of this iteration still hold their bytes.
  for (size_t i = 0; recv_arena_ != nullptr && i < n && recv_slots_used_ + count < kRingEntries;
       ++i) {
    BatchedRecv* recv = recvs[i];
    if (recv->loop_ != nullptr) {
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(ring_);
    if (sqe == nullptr) {
      break;
    }
    char* slot = recv_arena_ + (recv_slots_used_ + count) * kRecvSlotBytes;
    // MSG_DONTWAIT: an empty socket completes at once with -EAGAIN (the
    // kernel does not park the receive until data comes), so every receive
    // has completed when the submit returns.
    io_uring_prep_recv(sqe, recv->fd_, slot, kRecvSlotBytes, MSG_DONTWAIT);
    io_uring_sqe_set_data64(sqe, count);
    recv->data_ = slot;
    recv->capacity_ = kRecvSlotBytes;
    recv->taken_ = 0;
    batch[count++] = recv;
  }
  // The listeners' rounds take the entries the receives left.
  unsigned ops = count;
  unsigned first[kAheadAccepts];
  unsigned taken[kAheadAccepts];
  for (size_t k = 0; k < n_accepts && k < kAheadAccepts; ++k) {
    first[k] = ops;
    taken[k] = PrepareAccepts(accepts[k], ops);
    ops += taken[k];
  }
  if (ops == 0) {
    return;
  }
  recv_slots_used_ += count;
  int results[kRingEntries];
  bool more[kRingEntries];
  SubmitAndReap(ops, results, more);
  for (size_t k = 0; k < n_accepts && k < kAheadAccepts; ++k) {
    if (taken[k] > 0) {
      FinishAccepts(accepts[k], taken[k], results + first[k], more + first[k]);
    }
  }
  for (unsigned i = 0; i < count; ++i) {
    // Not taken by the kernel (or interrupted): the owner reads directly.
    if (results[i] != -ECANCELED && results[i] != -EINTR) {
      batch[i]->result_ = results[i];
      Append(recvs_head_, recvs_tail_, batch[i]);
    }
  }
}

void EventLoop::RefuseRingAcceptsForTesting(bool refuse) { g_refuse_ring_accepts.store(refuse); }

unsigned EventLoop::PrepareAccepts(BatchedAccept* accept, unsigned index) {
  if (accept->listen_fd_ < 0) {
    return 0;
  }
  const uint16_t flag =
      g_refuse_ring_accepts.load(std::memory_order_relaxed) ? kAcceptUnknownFlagForTesting
                                                            : kAcceptDontWait;
  unsigned n = std::min({accept->round_, accept->max_round_, BatchedAccept::kMaxRound,
                         io_uring_sq_space_left(ring_)});
  for (unsigned i = 0; i < n; ++i) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_);
    accept->lens_[i] = sizeof accept->addrs_[i];
    io_uring_prep_accept(sqe, accept->listen_fd_, reinterpret_cast<sockaddr*>(&accept->addrs_[i]),
                         &accept->lens_[i], SOCK_NONBLOCK | SOCK_CLOEXEC);
    sqe->ioprio |= flag;
    // Linked: the first accept that finds the queue empty (or fails) ends
    // the round, the kernel cancels the rest without trying them, so a
    // round may be larger than the connections that came.
    if (i + 1 < n) {
      sqe->flags |= IOSQE_IO_LINK;
    }
    io_uring_sqe_set_data64(sqe, index + i);
  }
  return n;
}

void EventLoop::FinishAccepts(BatchedAccept* accept, unsigned n, const int* results,
                              const bool* more) {
  unsigned kept = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (results[i] == -ECANCELED) {
      continue;  // after the one that ended the round, or the ring is off now
    }
    ++ring_accepts_;
    if (results[i] == -EINVAL) {
      // A kernel before 6.10 refuses IORING_ACCEPT_DONTWAIT: accept4 from
      // now on (it also says whether the listener itself is the problem).
      ring_accepts_refused_ = true;
      continue;
    }
    nonempty_reported_ = nonempty_reported_ || more[i];
    // Entries are moved down over the dropped ones: addresses too.
    if (kept != i) {
      accept->addrs_[kept] = accept->addrs_[i];
      accept->lens_[kept] = accept->lens_[i];
    }
    accept->results_[kept] = results[i];
    accept->more_[kept] = more[i];
    ++kept;
  }
  accept->next_ = 0;
  accept->count_ = kept;
  accept->emptied_ = false;
  if (kept == n && n > 0 && accept->results_[n - 1] >= 0 &&
      (accept->more_[n - 1] || !nonempty_reported_)) {
    // Every accept found a connection and more may wait: a larger round next.
    accept->round_ = std::min(2 * n, BatchedAccept::kMaxRound);
  }
}

int EventLoop::Accept(BatchedAccept* accept, sockaddr_storage* addr, socklen_t* len) {
  // The listener is empty: the next round is sized for half as many again
  // as came for this one (the accepts past the last connection cost little:
  // the kernel cancels them).
  auto drained = [accept] {
    accept->round_ = std::min(accept->accepted_ + accept->accepted_ / 2 + 2, BatchedAccept::kMaxRound);
    accept->accepted_ = 0;
    accept->emptied_ = false;
    errno = EAGAIN;
    return -1;
  };
  for (;;) {
    while (accept->next_ < accept->count_) {
      const unsigned i = accept->next_++;
      const int result = accept->results_[i];
      if (result >= 0) {
        std::memcpy(addr, &accept->addrs_[i], std::min(*len, accept->lens_[i]));
        *len = accept->lens_[i];
        accept->emptied_ = nonempty_reported_ && !accept->more_[i];
        ++accept->accepted_;
        return result;
      }
      // A round's accepts are linked: the first that fails ends it (the
      // kernel cancels the rest, which FinishAccepts drops), so nothing of
      // the round follows a failure.
      if (result == -EAGAIN) {
        return drained();
      }
      // Another error (EMFILE, ECONNABORTED): the owner asks again when it
      // will, and the next call starts a new round.
      accept->emptied_ = false;
      errno = -result;
      return -1;
    }
    if (accept->emptied_) {
      return drained();  // the kernel said the last one left the queue empty
    }
    if (ring_accepts_on() && accept->listen_fd_ >= 0) {
      int results[BatchedAccept::kMaxRound];
      bool more[BatchedAccept::kMaxRound];
      const unsigned n = PrepareAccepts(accept, 0);
      if (n > 0) {
        SubmitAndReap(n, results, more);
        FinishAccepts(accept, n, results, more);
        if (accept->pending()) {
          continue;
        }
      }
    }
    ++direct_accepts_;
    int fd = ::accept4(accept->listen_fd_, reinterpret_cast<sockaddr*>(addr), len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      ++accept->accepted_;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      drained();
      errno = EAGAIN;
    }
    return fd;
  }
}

void EventLoop::EndRecvs() {
  while (recvs_head_ != nullptr) {
    BatchedRecv* recv = recvs_head_;
    CancelRecv(recv);
    recv->keep_(recv->owner_);
  }
  recv_slots_used_ = 0;
}

void EventLoop::EndBatch() {
  RunDeferred();
  if (sends_head_ != nullptr || !closes_.empty()) {
    FlushSends();
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

int EventLoop::MsToNextTimerTick(int max_ms) const {
  if (armed_timers_ == 0) {
    return max_ms;
  }
  const int64_t first = wheel_time_ms_ / kTickMs;  // the first tick not processed
  const int64_t last = (now_ms_ + max_ms) / kTickMs;
  for (int64_t tick = first; tick <= last && tick - first < static_cast<int64_t>(kWheelSlots);
       ++tick) {
    for (const Timer* t = wheel_[static_cast<size_t>(tick) % kWheelSlots]; t != nullptr;
         t = t->next_) {
      // A timer of this turn of the wheel (not one a whole turn or more ahead)
      // or one already due.
      if (t->deadline_ms_ / kTickMs <= tick) {
        // RunTimers processes a tick once its last millisecond has passed.
        const int64_t wait = tick * kTickMs + kTickMs - 1 - now_ms_;
        return static_cast<int>(std::clamp<int64_t>(wait, 0, max_ms));
      }
    }
  }
  return max_ms;
}

void EventLoop::Run() {
  constexpr int kMaxEvents = 256;
  // Longer than the 1 s timers (the idle access-log flush, the heap trim):
  // a sleep capped at their period would wake twice for each.
  constexpr int kMaxSleepMs = 2000;
  epoll_event events[kMaxEvents];
  // The last wait found no event: the loop is idle and sleeps until its
  // earliest timer is due (an idle proxy wakes when it has something to do,
  // not 100 times a second), at most kMaxSleepMs. A loop with events waits
  // at most one tick, and does not walk the wheel for it.
  bool idle = true;
  while (!stop_.load(std::memory_order_acquire)) {
    int timeout = kMaxSleepMs;
    if (deferred_head_ != nullptr || next_turn_head_ != nullptr) {
      timeout = 0;  // callbacks left over from the last batch, or for this turn
    } else if (armed_timers_ > 0 && !idle) {
      // Until the end of the first tick not processed (RunTimers takes a tick
      // once its last millisecond has passed), not a flat tick from now: a
      // timer is then at most one tick late while events keep coming. At
      // least 1: RunTimers just took every tick that had ended.
      timeout = static_cast<int>(
          std::clamp<int64_t>(wheel_time_ms_ + kTickMs - 1 - now_ms_, 1, kTickMs));
    } else if (armed_timers_ > 0) {
      UpdateTime();  // this turn's callbacks took time since the iteration began
      timeout = MsToNextTimerTick(kMaxSleepMs);
    }
    int n = epoll_wait(epoll_fd_, events, kMaxEvents, timeout);
    idle = n <= 0;
    now_ms_ = MonotonicMs();
    // This turn's: they run at the end of its first batch, after its events.
    while (next_turn_head_ != nullptr) {
      Deferred* d = next_turn_head_;
      CancelDeferred(d);
      Append(deferred_head_, deferred_tail_, d);
    }
    if (n > 0 && uring_state_ != UringState::kOff) {
      ReadAhead(events, n);
    }
    for (int i = 0; i < n; ++i) {
      auto* handler = static_cast<IoHandler*>(events[i].data.ptr);
      if (handler == kWakeHandler) {
        DrainPosted();
      } else {
        handler->OnIo(events[i].events);
      }
      // A long batch hands its sends to the kernel every kFlushEvents
      // events, not only at its end: the peers (clients, servers) work on
      // the first answers while the rest are made, and a process that runs
      // out of its CPU quota (a pod's limit) mid-batch has not held back
      // every answer of the batch for the quota's whole period.
      if ((i + 1) % kFlushEvents == 0 && i + 1 < n &&
          (sends_head_ != nullptr || !closes_.empty())) {
        FlushSends();
      }
    }
    EndBatch();
    RunTimers();
    EndBatch();
    EndRecvs();  // owners keep what they did not take: the arena is reused next
    for (size_t i = 0; i < graveyard_.size(); ++i) {
      delete graveyard_[i];
    }
    graveyard_.clear();
  }
  stop_.store(false, std::memory_order_relaxed);  // a later Run runs again
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
