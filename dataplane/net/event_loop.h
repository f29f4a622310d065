#pragma once

// One event loop per worker thread: epoll (edge-triggered) plus a hashed
// timing wheel. Everything except Stop() and Post() runs on the loop's thread.

#include <sys/epoll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

struct io_uring;  // liburing

namespace kwd::net {

class BatchedAccept;
class BatchedRecv;

class IoHandler {
 public:
  virtual void OnIo(uint32_t events) = 0;
  // Asked before the batch's events are dispatched, for a handler whose
  // socket is readable (EPOLLIN, HUP or ERR): the receive its OnIo is about
  // to make, or null. The loop then makes the receives of all such handlers
  // in one kernel entry (EventLoop::batching_sends()) and their transports'
  // Read returns the bytes first. Only a handler that reads this socket on
  // this event opts in: bytes it does not take are kept by its transport.
  virtual BatchedRecv* ReadAhead() { return nullptr; }
  // The same for a listening socket: its accepts the loop makes in that
  // kernel entry (EventLoop::Accept hands their sockets out), or null.
  virtual BatchedAccept* AcceptAhead() { return nullptr; }

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
  bool next_turn_ = false;  // on the loop's next-turn list
};

// A socket send the loop hands to its io_uring at the end of the batch,
// together with every other one queued in that batch: one kernel entry for
// all of them. Embedded in its owner (PlainTransport); the loop calls `done`
// with the send's result (bytes sent or -errno) before the submit returns:
// no send stays in flight, so the owner's bytes may be freed after it.
class BatchedSend {
 public:
  using Callback = void (*)(void* owner, int result);
  BatchedSend(void* owner, Callback done) : owner_(owner), done_(done) {}
  ~BatchedSend();
  BatchedSend(const BatchedSend&) = delete;
  BatchedSend& operator=(const BatchedSend&) = delete;
  bool queued() const { return loop_ != nullptr; }

 private:
  friend class EventLoop;
  void* owner_;
  Callback done_;
  EventLoop* loop_ = nullptr;
  BatchedSend* prev_ = nullptr;
  BatchedSend* next_ = nullptr;
  int fd_ = -1;
  const char* data_ = nullptr;
  size_t size_ = 0;
  int close_fd_ = -1;  // QueueClose: the close that follows this send
};

// A socket receive the loop makes for its owner (PlainTransport) as soon as
// epoll reports the socket readable, together with those of every other
// readable socket of the batch: one kernel entry for all of them. The bytes
// land in a slot of the loop's scratch arena, valid until the end of the
// loop iteration; the owner takes them (Take) while it handles the event.
// What it has not taken by then goes to `keep` (the owner copies it), and the
// receive is over. Embedded in its owner: destroying it cancels it.
class BatchedRecv {
 public:
  using Callback = void (*)(void* owner);
  BatchedRecv(void* owner, int fd, Callback keep) : owner_(owner), keep_(keep), fd_(fd) {}
  ~BatchedRecv();
  BatchedRecv(const BatchedRecv&) = delete;
  BatchedRecv& operator=(const BatchedRecv&) = delete;
  // A result of this iteration waits to be taken.
  bool pending() const { return loop_ != nullptr; }
  // The receive's result: bytes (> 0), 0 at the end of the stream, -errno
  // (-EAGAIN: the socket was empty).
  int result() const { return result_; }
  // The received bytes not taken yet.
  const char* rest() const { return data_ + taken_; }
  size_t rest_size() const { return result_ > 0 ? static_cast<size_t>(result_) - taken_ : 0; }
  // The receive found fewer bytes than its slot holds: it emptied the socket
  // (bytes that came after it raise a new epoll edge).
  bool emptied_socket() const { return result_ >= 0 && static_cast<size_t>(result_) < capacity_; }
  void Consume(size_t n) { taken_ += n; }
  // The result is taken: the receive is over.
  void Finish();

 private:
  friend class EventLoop;
  void* owner_;
  Callback keep_;
  EventLoop* loop_ = nullptr;
  BatchedRecv* prev_ = nullptr;
  BatchedRecv* next_ = nullptr;
  int fd_;
  const char* data_ = nullptr;
  size_t capacity_ = 0;
  size_t taken_ = 0;
  int result_ = 0;
};

// Accepts on one listening socket made through the loop's io_uring, a round
// of several in one kernel entry (IORING_OP_ACCEPT with
// IORING_ACCEPT_DONTWAIT: an empty listener completes at once with -EAGAIN;
// linked, so the first that finds the queue empty ends the round):
// the first round of an epoll batch goes in the kernel entry of the batch's
// read-ahead (IoHandler::AcceptAhead). EventLoop::Accept hands the accepted
// sockets out one at a time, as accept4(2) would. Embedded in its owner
// (the listener's handler); sockets accepted and not taken yet are closed
// with it (or by Discard).
class BatchedAccept {
 public:
  BatchedAccept() = default;
  ~BatchedAccept() { Discard(); }
  BatchedAccept(const BatchedAccept&) = delete;
  BatchedAccept& operator=(const BatchedAccept&) = delete;
  // The listener of the next rounds and the most accepts a round may make
  // (1: each accepted socket is handed over before the next is accepted).
  void Aim(int listen_fd, unsigned max_round) {
    listen_fd_ = listen_fd;
    max_round_ = max_round < 1 ? 1 : (max_round > kMaxRound ? kMaxRound : max_round);
  }
  // Results of a round wait to be handed out.
  bool pending() const { return next_ < count_; }
  // Closes the sockets accepted and not handed out (the listener closes).
  void Discard();
  static constexpr unsigned kMaxRound = 64;

 private:
  friend class EventLoop;
  int listen_fd_ = -1;
  unsigned max_round_ = kMaxRound;
  unsigned round_ = 2;  // accepts of the next round: from the last event's
  unsigned count_ = 0;  // results of the current round
  unsigned next_ = 0;   // the next to hand out
  // The last socket handed out left the listener's queue empty (the kernel
  // said so: IORING_CQE_F_SOCK_NONEMPTY was not set).
  bool emptied_ = false;
  unsigned accepted_ = 0;  // sockets handed out since the last -EAGAIN
  int results_[kMaxRound];
  bool more_[kMaxRound];  // IORING_CQE_F_SOCK_NONEMPTY of the result
  socklen_t lens_[kMaxRound];
  sockaddr_storage addrs_[kMaxRound];
};

// Whether the loops batch socket sends through io_uring (`--io-uring`).
enum class IoUringMode : uint8_t { kOff, kAuto };

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

  // Runs until Stop() (Run may be called again after). Each iteration waits
  // for I/O or the next tick.
  void Run();
  // Thread-safe.
  void Stop();
  // Runs `fn` on the loop's thread soon. Thread-safe.
  void Post(std::function<void()> fn);

  // Runs `deferred` at the end of the current batch (or of the next one, when
  // called outside a batch).
  void Defer(Deferred* deferred);
  // Runs `deferred` at the end of the next iteration's first batch: after
  // the I/O events of the next epoll_wait (which then does not wait), the
  // timers of that iteration following. For an owner that stopped with work
  // left (a budget per turn): the other connections and the timers (a drain
  // deadline) go first. A callback queued either way stays as queued.
  void DeferToNextTurn(Deferred* deferred);
  void CancelDeferred(Deferred* deferred);

  void DeleteLater(Deletable* object) { graveyard_.push_back(object); }

  // Process-wide, set before any loop runs. `on_unavailable` (may be null) is
  // called once per process, on a loop's thread, with the errno of the first
  // io_uring set-up that failed (seccomp's EPERM under container runtimes,
  // ENOSYS, kernel.io_uring_disabled): the loops then use direct syscalls.
  static void SetIoUringMode(IoUringMode mode, void (*on_unavailable)(int error));
  // Test hook: every later io_uring set-up fails with `error` (0: stop).
  static void FailIoUringSetupForTesting(int error);
  // True when this loop batches sends; sets up its io_uring on first use
  // (call on the loop's thread only: the ring is single-issuer).
  bool batching_sends() {
    if (uring_state_ == UringState::kUnknown) {
      SetUpUring();
    }
    return uring_state_ == UringState::kOn;
  }
  // Queues a send of `size` bytes at `data` (kept valid until `done` runs or
  // the send is cancelled) for the end of the batch. Only when
  // batching_sends().
  void QueueSend(BatchedSend* send, int fd, const char* data, size_t size);
  void CancelSend(BatchedSend* send);
  // Submits every queued send in one kernel entry and runs their callbacks.
  void FlushSends();
  void CancelRecv(BatchedRecv* recv);
  // Makes the receives of `recvs` now, in one kernel entry, as the loop's
  // read-ahead does for the sockets of an epoll batch: for sockets their
  // owners read next in this iteration without an event (the first bytes of
  // newly accepted connections). Each that got a result is pending() until
  // the end of the iteration; the others (no ring, no slot of this
  // iteration's arena left, already pending) are untouched: their owners
  // read directly.
  void ReadAheadNow(BatchedRecv* const* recvs, size_t count);
  // Bytes of one read-ahead slot: a larger message's rest is read directly.
  static constexpr size_t kRecvSlotBytes = 16 * 1024;
  // Closes socket `fd` at the end of the batch, in the kernel entry of the
  // batched sends: a new connection per request saves its close(2). `after`
  // (may be null) is the socket's queued send: linked before the close, which
  // runs only once that send succeeded; when it failed, the loop closes the
  // socket with a reset (its bytes did not all go). The owner does no I/O on
  // `fd` after this. Only when batching_sends().
  void QueueClose(int fd, BatchedSend* after);

  // accept4(listen_fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC) for the
  // listener `accept` is aimed at: the next socket of its current round,
  // else a new round through the ring (the first of an epoll batch was made
  // with the batch's read-ahead), else (no ring, or a kernel before 6.10
  // without IORING_ACCEPT_DONTWAIT) the system call. -1 with errno as
  // accept4 sets it; EAGAIN once the listener's queue is empty.
  int Accept(BatchedAccept* accept, sockaddr_storage* addr, socklen_t* len);
  // accept4(2) calls made directly, accept operations the kernel ran
  // through the ring (not those a round's end cancelled) and io_uring
  // submits of any kind by this loop (tests).
  uint64_t direct_accepts() const { return direct_accepts_; }
  uint64_t ring_accepts() const { return ring_accepts_; }
  uint64_t ring_submits() const { return ring_submits_; }
  // The flags this loop's io_uring was set up with (0 without one; tests).
  unsigned ring_setup_flags() const;
  // Test hook: later accept operations through the ring carry a flag the
  // kernel refuses (-EINVAL), as a kernel before 6.10 refuses
  // IORING_ACCEPT_DONTWAIT.
  static void RefuseRingAcceptsForTesting(bool refuse);

  // Gives the heap's free pages back to the kernel (malloc_trim) about
  // kHeapTrimDelayMs from now, once however often it is asked meanwhile: for
  // an owner that freed large blocks lying between long-lived ones (a TLS
  // connection's record buffers once it goes idle), whose pages glibc would
  // otherwise keep resident. At most one trim per loop per delay.
  void TrimHeapSoon();
  static constexpr int64_t kHeapTrimDelayMs = 1000;
  // Trims this loop made (tests).
  uint64_t heap_trims() const { return heap_trims_; }

  // Time cached at the start of the current iteration.
  int64_t now_ms() const { return now_ms_; }
  void UpdateTime() { now_ms_ = MonotonicMs(); }

 private:
  static constexpr int kFlushEvents = 32;  // Run(): sends go at least this often
  static constexpr size_t kWheelSlots = 1024;
  static constexpr int64_t kTickMs = 10;

  void RunTimers();
  // Milliseconds until RunTimers would process the tick of the earliest
  // armed timer (0: now), at most max_ms. Walks the wheel's slots from the
  // first tick not processed, up to max_ms ahead.
  int MsToNextTimerTick(int max_ms) const;
  void RunDeferred();
  void DrainPosted();
  void Unlink(Timer* timer);
  // The FIFO lists of Deferred callbacks and BatchedSends: intrusive, doubly
  // linked through the node's prev_/next_; a node is on this loop's list
  // while its loop_ is this.
  template <class Node>
  void Append(Node*& head, Node*& tail, Node* node);
  template <class Node>
  void Detach(Node*& head, Node*& tail, Node* node);
  void SetUpUring();
  void EndBatch();
  // Submits the `count` prepared entries and waits for all their completions
  // (results[i]: the result of the entry whose user data is i; -ECANCELED
  // when the kernel did not take it: the ring is not used again).
  // `more` (may be null): per entry, whether its completion carried
  // IORING_CQE_F_SOCK_NONEMPTY.
  unsigned SubmitAndReap(unsigned count, int* results, bool* more = nullptr);
  // The read-ahead of the handlers of `events` that opt in.
  void ReadAhead(const epoll_event* events, int n);
  // Receives of those of `recvs` not pending yet into free arena slots, and
  // a round of accepts for each of `accepts` (none pending), in one kernel
  // entry (the ring is on).
  void SubmitRecvs(BatchedRecv* const* recvs, size_t n, BatchedAccept* const* accepts = nullptr,
                   size_t n_accepts = 0);
  // Prepares the next round of `accept` in free entries of the ring's
  // submission queue, the first with user data `index`: the entries used.
  unsigned PrepareAccepts(BatchedAccept* accept, unsigned index);
  // Takes a round's results (those of the `n` entries PrepareAccepts used).
  void FinishAccepts(BatchedAccept* accept, unsigned n, const int* results, const bool* more);
  bool ring_accepts_on() const {
    return uring_state_ == UringState::kOn && !ring_accepts_refused_;
  }
  // Ends the iteration's receives; owners keep what they did not take.
  void EndRecvs();

  enum class UringState : uint8_t { kUnknown, kOn, kOff };

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
  Deferred* next_turn_head_ = nullptr;  // FIFO, joins the above after epoll_wait
  Deferred* next_turn_tail_ = nullptr;
  UringState uring_state_ = UringState::kUnknown;
  ::io_uring* ring_ = nullptr;
  BatchedSend* sends_head_ = nullptr;  // FIFO
  BatchedSend* sends_tail_ = nullptr;
  BatchedRecv* recvs_head_ = nullptr;  // the iteration's read-aheads
  BatchedRecv* recvs_tail_ = nullptr;
  char* recv_arena_ = nullptr;    // kRingEntries slots, mapped on first use
  unsigned recv_slots_used_ = 0;  // by this iteration's read-aheads, from the first
  std::vector<int> closes_;       // QueueClose without a send to follow
  // The kernel refused an accept operation (-EINVAL: no
  // IORING_ACCEPT_DONTWAIT before 6.10): accept4 from then on.
  bool ring_accepts_refused_ = false;
  // An accept's completion carried IORING_CQE_F_SOCK_NONEMPTY once: this
  // kernel says when a listener has more, so its absence means empty.
  bool nonempty_reported_ = false;
  uint64_t direct_accepts_ = 0;
  uint64_t ring_accepts_ = 0;
  uint64_t ring_submits_ = 0;
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
  uint64_t heap_trims_ = 0;
  // Last: destroyed first, while the wheel it may be linked into is still
  // there.
  Timer heap_trim_timer_{this, &EventLoop::OnHeapTrim};
  static void OnHeapTrim(void* self);
};

}  // namespace kwd::net
