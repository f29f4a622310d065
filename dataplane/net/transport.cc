#include "dataplane/net/transport.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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
  if (recv_.pending() || !kept_.empty() || kept_end_ <= 0) {
    return TakeReadAhead(data, size, drained);
  }
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

ssize_t PlainTransport::TakeReadAhead(char* data, size_t size, bool* drained) {
  int result;
  if (recv_.pending()) {
    result = recv_.result();
    if (result > 0) {
      size_t n = std::min(size, recv_.rest_size());
      std::memcpy(data, recv_.rest(), n);
      recv_.Consume(n);
      if (recv_.rest_size() == 0) {
        // As a short recv(): the receive emptied the socket, and what came
        // after it raises a new edge (reported after this iteration).
        *drained = recv_.emptied_socket();
        recv_.Finish();
      }
      return static_cast<ssize_t>(n);
    }
    recv_.Finish();
  } else if (!kept_.empty()) {
    // Kept from an earlier iteration: an edge reported since may have been
    // for more bytes, so the socket is read next (drained stays false).
    size_t n = std::min(size, kept_.size());
    std::memcpy(data, kept_.view().data(), n);
    kept_.Consume(n);
    if (kept_.empty()) {
      kept_.Release();
    }
    return static_cast<ssize_t>(n);
  } else {
    result = kept_end_;
    kept_end_ = 1;
  }
  if (result == 0) {
    return kEof;
  }
  if (result == -EAGAIN) {
    *drained = true;
    return kWouldBlock;
  }
  return kError;
}

void PlainTransport::KeepReadAhead(void* self) {
  auto* t = static_cast<PlainTransport*>(self);
  const BatchedRecv& recv = t->recv_;
  if (recv.result() > 0) {
    if (recv.rest_size() > 0) {
      t->kept_.Append({recv.rest(), recv.rest_size()});
    }
  } else if (recv.result() != -EAGAIN) {
    t->kept_end_ = recv.result();
  }
}

BatchedRecv* PlainTransport::ReadAhead() {
  if (loop_ == nullptr || !kept_.empty() || kept_end_ <= 0 || !loop_->batching_sends()) {
    return nullptr;
  }
  return &recv_;
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
    t->sent_ += static_cast<uint64_t>(result);
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

void* PlainTransport::operator new(size_t size) {
  return size == sizeof(PlainTransport) ? proxy::PerThreadBlocks<sizeof(PlainTransport)>::Take()
                                        : ::operator new(size);
}

void PlainTransport::operator delete(void* block, size_t size) {
  if (size == sizeof(PlainTransport)) {
    proxy::PerThreadBlocks<sizeof(PlainTransport)>::Give(block);
  } else {
    ::operator delete(block);
  }
}

bool PlainTransport::BeforeClose(size_t dropped) {
  // A failed connection (nothing will ever go) counts as flushed: the peer
  // is gone and hears nothing more either way.
  bool lost = !FlushQueued() || dropped > 0;
  queue_.Clear();
  queue_.Release();
  recv_.Finish();
  kept_.Clear();
  kept_.Release();
  loop_ = nullptr;
  if (lost) {
    ResetOnClose(fd_);
  }
  return !lost;
}

bool PlainTransport::CanCloseBatched() const {
  return loop_ != nullptr && loop_->batching_sends() && !blocked_ && !failed_ &&
         sent_ + queue_.size() <= kMaxBytesForBatchedClose;
}

void PlainTransport::CloseBatched() {
  Rearm();  // the queued bytes, if any, go with the close
  loop_->QueueClose(fd_, send_.queued() ? &send_ : nullptr);
  // No I/O from here on: the send's result comes back to OnSent, which sends
  // directly only when the ring did not take it (the close waits for that).
  loop_ = nullptr;
}

ssize_t PlainTransport::SendDirect(const char* data, size_t size) {
  for (;;) {
    ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
    if (n >= 0) {
      sent_ += static_cast<uint64_t>(n);
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
