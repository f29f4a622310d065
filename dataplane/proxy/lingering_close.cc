#include "dataplane/proxy/lingering_close.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace kwd::proxy {

LingeringClose::LingeringClose(Worker* worker, int fd, bool registered)
    : worker_(worker),
      fd_(fd),
      registered_(registered),
      timer_(this, [](void* self) { static_cast<LingeringClose*>(self)->Close(); }) {}

LingeringClose::~LingeringClose() {
  if (!closed_) {
    ::close(fd_);  // the worker stopped with it still lingering
  }
}

void LingeringClose::Start() {
  net::EventLoop& loop = worker_->loop();
  deadline_ms_ = loop.now_ms() + kLingerTotalMs;
  // Only the client's bytes and its end matter now.
  const uint32_t events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  if (registered_) {
    loop.Modify(fd_, events, this);
  } else {
    registered_ = true;
    loop.Add(fd_, events, this);
  }
  loop.Schedule(&timer_, std::min(kLingerIdleMs, kLingerTotalMs));
  Discard();
}

void LingeringClose::OnIo(uint32_t /*events*/) {
  if (!closed_) {
    Discard();
  }
}

void LingeringClose::Discard() {
  // One buffer per thread: a lingering connection holds none.
  static thread_local char scratch[64 * 1024];
  bool got = false;
  for (;;) {
    ssize_t n = ::recv(fd_, scratch, sizeof scratch, MSG_DONTWAIT);
    if (n > 0) {
      got = true;
      dropped_bytes_ += static_cast<uint64_t>(n);
      if (dropped_bytes_ >= kLingerMaxBytes) {
        Close();
        return;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    }
    Close();  // the client's end (nothing is left unread) or an error
    return;
  }
  if (got) {
    net::EventLoop& loop = worker_->loop();
    int64_t left = deadline_ms_ - loop.now_ms();
    if (left <= 0) {
      Close();
      return;
    }
    loop.Schedule(&timer_, std::min(kLingerIdleMs, left));
  }
}

void LingeringClose::Close() {
  if (closed_) {
    return;
  }
  closed_ = true;
  worker_->loop().Cancel(&timer_);
  ::close(fd_);  // takes it out of the epoll set
  worker_->ConnectionClosed(this);
  worker_->loop().DeleteLater(this);
}

}  // namespace kwd::proxy
