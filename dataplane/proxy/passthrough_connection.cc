#include "dataplane/proxy/passthrough_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/log.h"

namespace kwd::proxy {
namespace {

constexpr size_t kReadChunk = 16 * 1024;

}  // namespace

PassthroughConnection::PassthroughConnection(Worker* worker, int fd, std::string client_ip)
    : worker_(worker),
      client_ip_(std::move(client_ip)),
      in_(4096),
      out_(4096),
      hello_(worker->options().max_client_hello_bytes),
      timer_(this, [](void* self) { static_cast<PassthroughConnection*>(self)->OnTimer(); }) {
  client_.fd = fd;
  upstream_handler_.owner = this;
}

PassthroughConnection::~PassthroughConnection() {
  if (phase_ != Phase::kClosed) {
    // Deleted by a stopping worker: release without the loop.
    worker_->passthrough_router().Complete(&decision_);
    if (client_.fd >= 0) {
      ::close(client_.fd);
    }
    if (upstream_.fd >= 0) {
      ::close(upstream_.fd);
    }
  }
}

void PassthroughConnection::Start() {
  start_ms_ = worker_->loop().now_ms();
  last_activity_ms_ = start_ms_;
  worker_->loop().Add(client_.fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, this);
  worker_->loop().Schedule(&timer_, worker_->options().header_timeout_ms);
  ReadHello();
}

void PassthroughConnection::BeginDrain() {
  // A tunnel has no request boundary to stop at: it keeps going until the
  // worker's drain deadline. One still waiting for its ClientHello ends now.
  if (phase_ == Phase::kHello) {
    Reject(static_cast<int>(PassthroughReject::kClosed), 503, "draining", "");
  }
}

void PassthroughConnection::OnIo(uint32_t events) {
  if (phase_ == Phase::kClosed) {
    return;
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    client_.readable = true;
  }
  if ((events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0) {
    client_.writable = true;
  }
  if (phase_ == Phase::kHello) {
    ReadHello();
  } else if (phase_ == Phase::kSplice) {
    Pump();
  }
}

void PassthroughConnection::OnUpstreamIo(uint32_t events) {
  if (phase_ == Phase::kClosed) {
    return;
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    upstream_.readable = true;
  }
  if ((events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0) {
    upstream_.writable = true;
  }
  if (phase_ == Phase::kConnecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) {
      return;
    }
    int error_number = net::SocketError(upstream_.fd);
    if (error_number != 0 || (events & EPOLLERR) != 0) {
      OnConnectFailed(error_number != 0 ? error_number : ECONNREFUSED);
      return;
    }
    phase_ = Phase::kSplice;
    worker_->loop().Cancel(&timer_);
    worker_->loop().Schedule(&timer_, worker_->options().passthrough_idle_timeout_ms);
    Pump();
    return;
  }
  if (phase_ == Phase::kSplice) {
    Pump();
  }
}

void PassthroughConnection::ReadHello() {
  // Read until the ClientHello is complete; it stays in `in_` to be sent on.
  while (client_.readable && hello_.status() == tls::ClientHelloStatus::kNeedMore) {
    size_t free_bytes = 0;
    char* p = in_.PrepareWrite(1, worker_->options().max_client_hello_bytes, &free_bytes);
    if (free_bytes == 0) {
      break;  // the parser refuses before the buffer is full
    }
    ssize_t n = ::recv(client_.fd, p, free_bytes, 0);
    if (n > 0) {
      in_.Commit(static_cast<size_t>(n));
      hello_.Feed(in_.view());
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      client_.readable = false;
      break;
    }
    Reject(static_cast<int>(PassthroughReject::kClosed), 400, "closed",
           n == 0 ? "client closed before its ClientHello was complete" : std::strerror(errno));
    return;
  }
  switch (hello_.status()) {
    case tls::ClientHelloStatus::kNeedMore:
      return;
    case tls::ClientHelloStatus::kInvalid:
      Reject(static_cast<int>(PassthroughReject::kBadClientHello), 400, "bad-client-hello",
             hello_.error());
      return;
    case tls::ClientHelloStatus::kTooLarge:
      Reject(static_cast<int>(PassthroughReject::kTooLarge), 400, "client-hello-too-large",
             hello_.error());
      return;
    case tls::ClientHelloStatus::kDone:
      break;
  }
  worker_->loop().Cancel(&timer_);
  Route(-1);
}

void PassthroughConnection::Route(int exclude_server) {
  decision_ = worker_->passthrough_router().Route(hello_.server_name(), client_ip_, exclude_server);
  if (decision_.group == nullptr) {
    Reject(static_cast<int>(PassthroughReject::kNoRoute), 421, "no-route",
           hello_.server_name().empty() ? "no server name and no default passthrough group"
                                        : "no passthrough group for this server name");
    return;
  }
  if (decision_.server == nullptr) {
    Reject(static_cast<int>(PassthroughReject::kNoServer), 503, "no-server",
           "the group has no usable server");
    return;
  }
  if (!retried_) {
    if (const GroupMetrics* m = worker_->GroupMetricsFor(decision_); m != nullptr) {
      m->passthrough_connections->Inc();
    }
  }
  Connect();
}

void PassthroughConnection::Connect() {
  const routing::ServerEntry& server = *decision_.server;
  net::Endpoint endpoint;
  if (!net::MakeEndpoint(server.address, static_cast<uint16_t>(server.port), &endpoint)) {
    OnConnectFailed(EINVAL);
    return;
  }
  int error_number = 0;
  int fd = worker_->ConnectToServer(endpoint, &error_number);
  if (fd < 0) {
    OnConnectFailed(error_number);
    return;
  }
  worker_->metrics().upstream_connects.Inc();
  upstream_ = Side{};
  upstream_.fd = fd;
  upstream_.writable = false;
  upstream_.readable = false;
  phase_ = Phase::kConnecting;
  worker_->loop().Add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, &upstream_handler_);
  worker_->loop().Cancel(&timer_);
  worker_->loop().Schedule(&timer_, worker_->options().connect_timeout_ms);
}

void PassthroughConnection::OnConnectFailed(int error_number) {
  if (const GroupMetrics* m = worker_->GroupMetricsFor(decision_); m != nullptr) {
    if (decision_.server_index >= 0 &&
        static_cast<size_t>(decision_.server_index) < m->servers.size()) {
      m->servers[decision_.server_index].connect_errors->Inc();
    }
  }
  if (upstream_.fd >= 0) {
    worker_->loop().Remove(upstream_.fd);
    ::close(upstream_.fd);
    upstream_.fd = -1;
  }
  if (net::IsLocalResourceError(error_number)) {
    worker_->WarnOutOfResources("connect to a passthrough server", error_number);
  }
  Log(LogLevel::kDebug, "passthrough", "connect to server failed",
      {{"server", decision_.server->name},
       {"group", decision_.group->key},
       {"error", std::strerror(error_number)}});
  worker_->passthrough_router().ForgetAffinity(decision_, client_ip_);
  const int failed = decision_.server_index;
  worker_->passthrough_router().Complete(&decision_);
  if (!retried_) {
    // Nothing was sent yet: one more try on another server.
    retried_ = true;
    worker_->metrics().retries.Inc();
    Route(failed);
    return;
  }
  Finish(502, "connect-failed");
}

void PassthroughConnection::Pump() {
  // Bytes the client sent go to the server and back; each direction stops
  // reading while its buffer is full.
  if (!Move(client_, in_, upstream_, &bytes_in_) || !Move(upstream_, out_, client_, &bytes_out_)) {
    Finish(200, "reset");
    return;
  }
  last_activity_ms_ = worker_->loop().now_ms();
  // A side that ended and whose bytes are all delivered: pass its FIN on.
  if (client_.eof && in_.empty() && !upstream_.shut_write) {
    ::shutdown(upstream_.fd, SHUT_WR);
    upstream_.shut_write = true;
  }
  if (upstream_.eof && out_.empty() && !client_.shut_write) {
    ::shutdown(client_.fd, SHUT_WR);
    client_.shut_write = true;
  }
  if (upstream_.shut_write && client_.shut_write) {
    Finish(200, "done");
  }
}

bool PassthroughConnection::Move(Side& from, Buffer& buffer, Side& to, uint64_t* moved) {
  const size_t limit = worker_->options().passthrough_buffer_bytes;
  for (int round = 0; round < 64; ++round) {
    bool progress = false;
    while (from.readable && !from.eof && buffer.size() < limit) {
      size_t free_bytes = 0;
      char* p =
          buffer.PrepareWrite(std::min(kReadChunk, limit - buffer.size()), limit, &free_bytes);
      if (free_bytes == 0) {
        break;
      }
      ssize_t n = ::recv(from.fd, p, std::min(free_bytes, limit - buffer.size()), 0);
      if (n > 0) {
        buffer.Commit(static_cast<size_t>(n));
        progress = true;
        continue;
      }
      if (n == 0) {
        from.eof = true;
        break;
      }
      if (errno == EINTR) {
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        from.readable = false;
        break;
      }
      return false;
    }
    while (to.writable && !buffer.empty()) {
      std::string_view pending = buffer.view();
      ssize_t n = ::send(to.fd, pending.data(), pending.size(), MSG_NOSIGNAL);
      if (n > 0) {
        buffer.Consume(static_cast<size_t>(n));
        *moved += static_cast<size_t>(n);
        progress = true;
        continue;
      }
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        to.writable = false;
        break;
      }
      return false;
    }
    if (!progress || buffer.size() >= limit) {
      break;
    }
  }
  return true;
}

void PassthroughConnection::OnTimer() {
  switch (phase_) {
    case Phase::kHello:
      worker_->metrics().timeouts_client.Inc();
      Reject(static_cast<int>(PassthroughReject::kTimeout), 408, "client-hello-timeout",
             "no complete ClientHello in time");
      return;
    case Phase::kConnecting:
      worker_->metrics().timeouts_upstream.Inc();
      OnConnectFailed(ETIMEDOUT);
      return;
    case Phase::kSplice: {
      const int64_t idle = worker_->loop().now_ms() - last_activity_ms_;
      const int64_t limit = worker_->options().passthrough_idle_timeout_ms;
      if (idle < limit) {
        worker_->loop().Schedule(&timer_, limit - idle);
        return;
      }
      worker_->metrics().timeouts_client.Inc();
      Finish(200, "idle-timeout");
      return;
    }
    case Phase::kClosed:
      return;
  }
}

void PassthroughConnection::Reject(int reject_index, int status, std::string_view reason,
                                   std::string_view detail) {
  worker_->metrics().passthrough_rejected[reject_index]->Inc();
  Log(LogLevel::kDebug, "passthrough", "connection refused",
      {{"client", client_ip_},
       {"reason", reason},
       {"server_name", hello_.server_name()},
       {"detail", detail}});
  LogLine(status, reason);
  Close();
}

void PassthroughConnection::Finish(int status, std::string_view reason) {
  if (status >= 500 || reason == "reset" || reason == "idle-timeout") {
    if (const GroupMetrics* m = worker_->GroupMetricsFor(decision_); m != nullptr) {
      m->passthrough_errors->Inc();
    }
  }
  LogLine(status, reason);
  Close();
}

void PassthroughConnection::LogLine(int status, std::string_view reason) {
  if (logged_) {
    return;
  }
  logged_ = true;
  if (const GroupMetrics* m = worker_->GroupMetricsFor(decision_); m != nullptr) {
    m->passthrough_bytes_in->Inc(bytes_in_);
    m->passthrough_bytes_out->Inc(bytes_out_);
  }
  if (!worker_->access_log().enabled()) {
    return;
  }
  AccessLogEntry entry;
  entry.client_ip = client_ip_;
  entry.method = "TLS";
  entry.target =
      hello_.server_name().empty() ? std::string_view("-") : std::string_view(hello_.server_name());
  entry.protocol = "passthrough";
  entry.status = status;
  entry.bytes_sent = bytes_out_;
  if (decision_.group != nullptr) {
    entry.group = decision_.group->key;
  }
  if (decision_.server != nullptr) {
    entry.server = decision_.server->name;
  }
  entry.duration_ms = static_cast<double>(worker_->loop().now_ms() - start_ms_);
  entry.reason = decision_.server != nullptr && status == 200
                     ? routing::PassthroughReasonName(decision_.reason)
                     : reason;
  worker_->access_log().Write(entry, std::time(nullptr));
}

void PassthroughConnection::Close() {
  if (phase_ == Phase::kClosed) {
    return;
  }
  phase_ = Phase::kClosed;
  worker_->loop().Cancel(&timer_);
  worker_->passthrough_router().Complete(&decision_);
  worker_->loop().Remove(client_.fd);
  ::close(client_.fd);
  client_.fd = -1;
  if (upstream_.fd >= 0) {
    worker_->loop().Remove(upstream_.fd);
    ::close(upstream_.fd);
    upstream_.fd = -1;
  }
  worker_->ConnectionClosed(this);
  worker_->loop().DeleteLater(this);
}

}  // namespace kwd::proxy
