#include "dataplane/net/transport.h"

#include <sys/socket.h>

#include <cerrno>

#include "dataplane/net/socket.h"

namespace kwd::net {

bool Transport::BeforeClose(size_t dropped) {
  if (dropped > 0) {
    ResetOnClose(fd_);
  }
  return dropped == 0;
}

ssize_t PlainTransport::Read(char* data, size_t size, bool* drained) {
  *drained = false;
  for (;;) {
    ssize_t n = ::recv(fd_, data, size, 0);
    if (n > 0) {
      // A short read emptied the socket; new data raises a new edge.
      *drained = static_cast<size_t>(n) < size;
      return n;
    }
    if (n == 0) {
      return kEof;
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      *drained = true;
      return kWouldBlock;
    }
    return kError;
  }
}

ssize_t PlainTransport::Write(const char* data, size_t size) {
  if (loop_ == nullptr || !loop_->batching_sends()) {
    if (!FlushQueued()) {
      return kWouldBlock;  // the ring went away with bytes queued
    }
    return failed_ ? kError : SendDirect(data, size);
  }
  if (failed_) {
    return kError;
  }
  if (blocked_ || queue_.size() + size > kMaxQueued) {
    if (!FlushQueued()) {
      return kWouldBlock;
    }
    if (failed_) {
      return kError;
    }
    if (size > kMaxQueued) {
      return SendDirect(data, size);  // nothing to gain from batching it
    }
  }
  queue_.Append({data, size});
  Rearm();
  return static_cast<ssize_t>(size);
}

void PlainTransport::Rearm() {
  if (!queue_.empty() && !blocked_ && !failed_ && loop_ != nullptr) {
    std::string_view bytes = queue_.view();
    loop_->QueueSend(&send_, fd_, bytes.data(), bytes.size());
  } else if (send_.queued()) {
    loop_->CancelSend(&send_);
  }
}

void PlainTransport::OnSent(void* self, int result) {
  auto* t = static_cast<PlainTransport*>(self);
  if (result > 0) {
    t->queue_.Consume(static_cast<size_t>(result));
    if (!t->queue_.empty()) {
      t->blocked_ = true;  // a short send: the socket is full (EPOLLOUT resumes)
    }
  } else if (result == -EAGAIN || result == 0) {
    t->blocked_ = true;
  } else if (result == -ECANCELED || result == -EINTR) {
    (void)t->FlushQueued();  // the ring did not take it: send directly
  } else {
    t->failed_ = true;  // the owner sees the error at its next read or write
    t->queue_.Clear();
  }
  if (t->queue_.empty()) {
    t->queue_.Release();
  }
  t->Rearm();  // queued again meanwhile: the send starts at the queue's front now
}

bool PlainTransport::FlushQueued() {
  if (send_.queued()) {
    loop_->CancelSend(&send_);
  }
  while (!queue_.empty() && !failed_) {
    std::string_view bytes = queue_.view();
    ssize_t n = SendDirect(bytes.data(), bytes.size());
    if (n > 0) {
      queue_.Consume(static_cast<size_t>(n));
      continue;
    }
    if (n == kWouldBlock) {
      blocked_ = true;
      return false;
    }
    failed_ = true;
    queue_.Clear();
  }
  blocked_ = false;
  queue_.Release();
  return true;
}

void PlainTransport::OnWritable() {
  if (blocked_) {
    blocked_ = false;
    Rearm();  // with whatever the owner writes in this batch
  }
}

bool PlainTransport::BeforeClose(size_t dropped) {
  // A failed connection (nothing will ever go) counts as flushed: the peer
  // is gone and hears nothing more either way.
  bool lost = !FlushQueued() || dropped > 0;
  queue_.Clear();
  queue_.Release();
  loop_ = nullptr;
  if (lost) {
    ResetOnClose(fd_);
  }
  return !lost;
}

ssize_t PlainTransport::SendDirect(const char* data, size_t size) {
  for (;;) {
    ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
    if (n >= 0) {
      return n > 0 ? n : kWouldBlock;
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return kWouldBlock;
    }
    return kError;
  }
}

}  // namespace kwd::net
