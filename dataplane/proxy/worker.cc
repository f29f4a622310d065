#include "dataplane/proxy/worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "dataplane/proxy/client_connection.h"

namespace kwd::proxy {

// ---- UpstreamConnection ----

UpstreamConnection::UpstreamConnection(Worker* worker, int fd, std::string_view address,
                                       uint32_t port)
    : worker(worker),
      fd(fd),
      transport(std::make_unique<net::PlainTransport>(fd)),
      address(address),
      port(port),
      idle_timer(this, [](void* self) {
        auto* c = static_cast<UpstreamConnection*>(self);
        c->worker->ForgetIdle(c);
        c->Close();
      }) {}

UpstreamConnection::~UpstreamConnection() = default;

void UpstreamConnection::OnIo(uint32_t events) {
  if (closed) {
    return;
  }
  if (owner != nullptr) {
    owner->OnUpstreamIo(events);
    return;
  }
  // Idle in the pool: any readiness means the server closed it or sent
  // something unexpected. Either way it cannot carry another request.
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    worker->ForgetIdle(this);
    Close();
  }
}

void UpstreamConnection::Close() {
  if (closed) {
    return;
  }
  closed = true;
  owner = nullptr;
  worker->loop().Cancel(&idle_timer);
  worker->loop().Remove(fd);
  ::close(fd);
  worker->loop().DeleteLater(this);
}

// ---- Worker ----

Worker::Worker(int id, const ProxyOptions& options, ProxyMetrics* metrics,
               std::shared_ptr<const session::AffinityCookieCodec> codec,
               std::shared_ptr<const routing::Clock> clock, int access_log_fd,
               tls::ServerTls* server_tls)
    : id_(id),
      options_(options),
      metrics_(metrics),
      router_(std::move(codec), std::move(clock)),
      access_log_(access_log_fd),
      server_tls_(server_tls),
      flush_timer_(this,
                   [](void* self) {
                     auto* w = static_cast<Worker*>(self);
                     w->access_log_.Flush();
                     w->loop_.Schedule(&w->flush_timer_, 100);
                   }),
      drain_timer_(this, [](void* self) { static_cast<Worker*>(self)->CheckDrained(); }),
      accept_retry_timer_(this, [](void* self) {
        auto* w = static_cast<Worker*>(self);
        w->Accept(false);
        w->Accept(true);
      }) {
  acceptor_.worker = this;
  tls_acceptor_.worker = this;
  tls_acceptor_.tls = true;
}

Worker::~Worker() {
  Join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
  }
  if (tls_listen_fd_ >= 0) {
    ::close(tls_listen_fd_);
  }
}

bool Worker::Start(std::string* error) {
  listen_fd_ = net::Listen(options_.listen, /*reuse_port=*/true, 4096, error);
  if (listen_fd_ < 0) {
    return false;
  }
  bound_ = net::LocalEndpoint(listen_fd_);
  if (server_tls_ != nullptr) {
    tls_listen_fd_ = net::Listen(options_.tls_listen, /*reuse_port=*/true, 4096, error);
    if (tls_listen_fd_ < 0) {
      *error = "--tls-listen " + options_.tls_listen.ToString() + ": " + *error;
      return false;
    }
    tls_bound_ = net::LocalEndpoint(tls_listen_fd_);
    loop_.Add(tls_listen_fd_, EPOLLIN | EPOLLET, &tls_acceptor_);
  }
  loop_.Add(listen_fd_, EPOLLIN | EPOLLET, &acceptor_);
  loop_.Schedule(&flush_timer_, 100);
  thread_ = std::thread([this] { Run(); });
  return true;
}

void Worker::Run() {
  loop_.Run();
  // Stopped: close what is left. Connections are deleted with the loop's
  // graveyard only while it runs, so delete them here.
  for (ClientConnection* c : std::vector<ClientConnection*>(connections_)) {
    delete c;
  }
  connections_.clear();
  for (auto& [key, bucket] : pool_) {
    for (UpstreamConnection* u : bucket.idle) {
      ::close(u->fd);
      delete u;
    }
  }
  pool_.clear();
  access_log_.Flush();
}

void Worker::Join() {
  if (thread_.joinable()) {
    thread_.join();
  }
}

void Worker::Apply(std::shared_ptr<const routing::RoutingTable> table,
                   std::shared_ptr<const TableMetrics> metrics) {
  loop_.Post([this, table = std::move(table), metrics = std::move(metrics)]() mutable {
    router_.Apply(std::move(table));
    table_metrics_ = std::move(metrics);
  });
}

void Worker::Accept(bool tls) {
  int listen_fd = tls ? tls_listen_fd_ : listen_fd_;
  if (listen_fd < 0) {
    return;  // draining: the listener is closed (or there is no TLS listener)
  }
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        accept_retry_ms_ = 0;
        return;
      }
      // Out of descriptors: idle pooled upstream connections would hold
      // theirs until the pool's idle timeout; give them up and try again.
      // The pool is empty then, so this retries at most once.
      if ((errno == EMFILE || errno == ENFILE) && CloseIdleUpstreams() > 0) {
        continue;
      }
      // Out of descriptors (or anything else): the connections stay queued
      // and no new edge comes when descriptors free up, so try again soon.
      WarnOutOfResources("accept a connection", errno);
      RetryAcceptLater();
      return;
    }
    accept_retry_ms_ = 0;
    if (connection_count_ >= options_.max_connections || draining_ ||
        table_metrics_ == nullptr) {
      metrics_->connections_rejected.Inc();
      ::close(fd);
      continue;
    }
    net::SetNoDelay(fd);
    net::Endpoint peer;
    peer.addr = addr;
    peer.len = len;
    std::unique_ptr<net::Transport> transport;
    if (tls) {
      transport = server_tls_->NewTransport(fd);
      if (transport == nullptr) {
        WarnOutOfResources("start a TLS connection", ENOMEM);
        ::close(fd);
        continue;
      }
    } else {
      transport = std::make_unique<net::PlainTransport>(fd);
    }
    auto* connection = new ClientConnection(this, std::move(transport), net::AddressString(peer));
    connection->slot = connections_.size();
    connections_.push_back(connection);
    ++connection_count_;
    metrics_->connections_accepted.Inc();
    metrics_->connections_active.Add(1);
    connection->Start();
  }
}

void Worker::RetryAcceptLater() {
  // 10 ms doubling to 1 s: prompt once a descriptor frees up, cheap while
  // none does. New connections still wake the listener in between.
  constexpr int64_t kFirstRetryMs = 10;
  constexpr int64_t kMaxRetryMs = 1000;
  accept_retry_ms_ = std::min(std::max(accept_retry_ms_ * 2, kFirstRetryMs), kMaxRetryMs);
  loop_.Schedule(&accept_retry_timer_, accept_retry_ms_);
}

void Worker::WarnOutOfResources(std::string_view what, int error_number) {
  if (loop_.now_ms() - last_resource_warning_ms_ < 1000) {
    return;
  }
  last_resource_warning_ms_ = loop_.now_ms();
  Log(LogLevel::kWarn, "proxy", "out of file descriptors or other local resources",
      {{"failed", what}, {"error", std::strerror(error_number)}, {"worker", std::to_string(id_)}});
}

void Worker::ConnectionClosed(ClientConnection* connection) {
  size_t slot = connection->slot;
  if (slot < connections_.size() && connections_[slot] == connection) {
    connections_[slot] = connections_.back();
    connections_[slot]->slot = slot;
    connections_.pop_back();
  }
  --connection_count_;
  metrics_->connections_active.Add(-1);
  if (draining_) {
    CheckDrained();
  }
}

uint64_t Worker::PoolKey(std::string_view address, uint32_t port, std::string_view tls_key) {
  return (std::hash<std::string_view>{}(address)*31 + port) * 31 +
         std::hash<std::string_view>{}(tls_key);
}

UpstreamConnection* Worker::TakeIdle(std::string_view address, uint32_t port,
                                     std::string_view tls_key) {
  auto it = pool_.find(PoolKey(address, port, tls_key));
  if (it == pool_.end() || it->second.address != address || it->second.port != port ||
      it->second.tls_key != tls_key) {
    return nullptr;
  }
  auto& idle = it->second.idle;
  while (!idle.empty()) {
    UpstreamConnection* c = idle.back();
    idle.pop_back();
    loop_.Cancel(&c->idle_timer);
    if (!c->closed) {
      return c;
    }
  }
  return nullptr;
}

void Worker::ReleaseIdle(UpstreamConnection* connection) {
  auto& bucket = pool_[PoolKey(connection->address, connection->port, connection->tls_key)];
  if (bucket.address.empty()) {
    bucket.address = connection->address;
    bucket.port = connection->port;
    bucket.tls_key = connection->tls_key;
  }
  if (draining_ || bucket.address != connection->address || bucket.port != connection->port ||
      bucket.tls_key != connection->tls_key ||
      bucket.idle.size() >= options_.max_idle_upstream_per_server) {
    connection->Close();
    return;
  }
  bucket.idle.push_back(connection);
  loop_.Schedule(&connection->idle_timer, options_.upstream_idle_timeout_ms);
}

void Worker::ForgetIdle(UpstreamConnection* connection) {
  auto it = pool_.find(PoolKey(connection->address, connection->port, connection->tls_key));
  if (it == pool_.end()) {
    return;
  }
  auto& idle = it->second.idle;
  for (size_t i = 0; i < idle.size(); ++i) {
    if (idle[i] == connection) {
      idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

size_t Worker::CloseIdleUpstreams() {
  size_t closed = 0;
  for (auto& [key, bucket] : pool_) {
    for (UpstreamConnection* u : bucket.idle) {
      closed += u->closed ? 0 : 1;
      u->Close();
    }
    bucket.idle.clear();
  }
  return closed;
}

void Worker::StopAccepting() {
  loop_.Cancel(&accept_retry_timer_);
  for (int* fd : {&listen_fd_, &tls_listen_fd_}) {
    if (*fd >= 0) {
      loop_.Remove(*fd);
      ::close(*fd);
      *fd = -1;
    }
  }
}

void Worker::Drain(int64_t grace_ms) {
  loop_.Post([this, grace_ms] {
    draining_ = true;
    drain_deadline_ms_ = loop_.now_ms() + grace_ms;
    StopAccepting();
    CloseIdleUpstreams();
    for (ClientConnection* c : std::vector<ClientConnection*>(connections_)) {
      c->BeginDrain();
    }
    CheckDrained();
  });
}

void Worker::CheckDrained() {
  if (connection_count_ == 0 || loop_.now_ms() >= drain_deadline_ms_) {
    access_log_.Flush();
    loop_.Stop();
    return;
  }
  if (!drain_timer_.armed()) {
    loop_.Schedule(&drain_timer_, 50);
  }
}

}  // namespace kwd::proxy
