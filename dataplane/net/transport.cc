#include "dataplane/net/transport.h"

#include <sys/socket.h>

#include <cerrno>

namespace kwd::net {

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
