#include "dataplane/proxy/worker.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "dataplane/net/proxy_protocol.h"
#include "dataplane/net/socket.h"
#include "dataplane/proxy/client_connection.h"
#include "dataplane/proxy/http2_connection.h"
#include "dataplane/proxy/lingering_close.h"
#include "dataplane/proxy/passthrough_connection.h"

namespace kwd::proxy {

std::string_view ListenerName(Listener listener) {
  switch (listener) {
    case Listener::kHttp:
      return "http";
    case Listener::kTls:
      return "tls";
    case Listener::kPassthrough:
      return "passthrough";
  }
  return "http";
}

namespace {

// All three listeners' clients send first (an HTTP request, a TLS
// ClientHello, a PROXY header), so a connection is accepted once its first
// bytes are there (TCP_DEFER_ACCEPT; nginx's `listen ... deferred` and
// HAProxy's `bind ... defer-accept` set the same option): a silent client is
// handed over after about a second and the idle/header/handshake timeouts run
// from then. Accepted sockets inherit TCP_NODELAY from the listener.
constexpr int kDeferAcceptSeconds = 1;

// TCP_NOTSENT_LOWAT of client connections: twice the response bytes a
// connection holds before it stops reading its server.
constexpr int kClientNotSentBytes = 128 * 1024;

// A client listener (SO_REUSEPORT, deferred accept). HTTP and TLS clients'
// sockets inherit TCP_NOTSENT_LOWAT from it: a client that reads slowly
// would otherwise have megabytes queued in the kernel and raise no write
// event until a third of them drained: longer than --response-timeout for a
// slow download, which was then cut short. With little queued, every bit the
// client takes shows as progress. (Passthrough tunnels keep the default.)
int ListenForClients(const net::Endpoint& endpoint, bool limit_unsent, std::string* error) {
  int fd = net::Listen(endpoint, /*reuse_port=*/true, 4096, error);
  if (fd >= 0) {
    net::PrepareClientFirstListener(fd, kDeferAcceptSeconds);
    if (limit_unsent) {
      net::SetNotSentLowWater(fd, kClientNotSentBytes);
    }
  }
  return fd;
}

// The PROXY protocol step (`--proxy-protocol`): waits (up to the header
// timeout) for the header on a fresh connection, consumes exactly it, then
// hands the socket to the listener's connection with the client address the
// header gave. A connection without a valid header is closed.
class ProxyHeaderStep final : public WorkerConnection {
 public:
  ProxyHeaderStep(Worker* worker, Listener listener, int fd, std::string peer_ip,
                  uint16_t peer_port)
      : worker_(worker),
        listener_(listener),
        fd_(fd),
        peer_ip_(std::move(peer_ip)),
        peer_port_(peer_port),
        timer_(this, [](void* self) {
          static_cast<ProxyHeaderStep*>(self)->Refuse("no complete PROXY header in time");
        }) {}
  ~ProxyHeaderStep() override {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }

  void Start() override {
    worker_->loop().Add(fd_, EPOLLIN | EPOLLRDHUP | EPOLLET, this);
    worker_->loop().Schedule(&timer_, worker_->options().header_timeout_ms);
    OnIo(EPOLLIN);
  }
  void BeginDrain() override { Refuse("draining"); }

  void OnIo(uint32_t /*events*/) override {
    if (done_) {
      return;
    }
    net::ProxyHeader header;
    std::string error;
    switch (net::ReadProxyHeader(fd_, &header, &error)) {
      case net::ProxyReadStatus::kNeedMore:
        return;
      case net::ProxyReadStatus::kInvalid:
      case net::ProxyReadStatus::kClosed:
        Refuse(error);
        return;
      case net::ProxyReadStatus::kDone:
        break;
    }
    done_ = true;
    worker_->loop().Cancel(&timer_);
    worker_->loop().Remove(fd_);
    const int fd = fd_;
    fd_ = -1;
    std::string client_ip = header.local ? peer_ip_ : header.source_address;
    const uint16_t client_port = header.local ? peer_port_ : header.source_port;
    // The step leaves the worker's list; the connection takes its place
    // (and its count).
    worker_->Detach(this);
    worker_->loop().DeleteLater(this);
    worker_->StartConnection(listener_, fd, std::move(client_ip), client_port);
  }

 private:
  void Refuse(std::string_view why) {
    if (done_) {
      return;
    }
    done_ = true;
    worker_->metrics().proxy_protocol_rejected.Inc();
    Log(LogLevel::kDebug, "proxy", "connection refused: PROXY protocol header",
        {{"listener", ListenerName(listener_)}, {"peer", peer_ip_}, {"error", why}});
    worker_->loop().Cancel(&timer_);
    worker_->loop().Remove(fd_);
    ::close(fd_);
    fd_ = -1;
    worker_->ConnectionClosed(this);
    worker_->loop().DeleteLater(this);
  }

  Worker* worker_;
  Listener listener_;
  int fd_;
  std::string peer_ip_;
  uint16_t peer_port_;
  bool done_ = false;
  net::Timer timer_;
};

}  // namespace

// ---- UpstreamConnection ----

UpstreamConnection::UpstreamConnection(Worker* worker, int fd, std::string_view address,
                                       uint32_t port)
    : worker(worker),
      fd(fd),
      transport(std::make_unique<net::PlainTransport>(fd, &worker->loop())),
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
  if ((events & EPOLLOUT) != 0) {
    transport->OnWritable();
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

net::BatchedRecv* UpstreamConnection::ReadAhead() {
  // Carrying a request: its exchange reads the response on the event (idle
  // in the pool, readiness closes it; connecting, it reads nothing yet).
  if (closed || owner == nullptr || connecting) {
    return nullptr;
  }
  return transport->ReadAhead();
}

void UpstreamConnection::Close(size_t dropped) {
  if (closed) {
    return;
  }
  closed = true;
  owner = nullptr;
  worker->loop().Cancel(&idle_timer);
  worker->loop().Remove(fd);
  transport->BeforeClose(dropped);
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
      router_(std::move(codec), clock),
      passthrough_router_(std::move(clock)),
      access_log_(access_log_fd),
      server_tls_(server_tls),
      flush_timer_(this,
                   [](void* self) {
                     auto* w = static_cast<Worker*>(self);
                     w->access_log_.Flush();
                     const bool moved = w->PublishBufferBytes();
                     w->flush_slow_ = !moved;
                     w->loop_.Schedule(&w->flush_timer_, moved ? kFlushMs : kIdleFlushMs);
                   }),
      drain_timer_(this, [](void* self) { static_cast<Worker*>(self)->CheckDrained(); }),
      accept_retry_timer_(this, [](void* self) { static_cast<Worker*>(self)->AcceptAll(); }) {
  acceptor_.worker = this;
  acceptor_.listener = Listener::kHttp;
  acceptor_.fd = &listen_fd_;
  passthrough_acceptor_.worker = this;
  passthrough_acceptor_.listener = Listener::kPassthrough;
  passthrough_acceptor_.fd = &passthrough_fd_;
  tls_acceptor_.worker = this;
  tls_acceptor_.listener = Listener::kTls;
  tls_acceptor_.fd = &tls_listen_fd_;
}

Worker::~Worker() {
  Join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
  }
  if (passthrough_fd_ >= 0) {
    ::close(passthrough_fd_);
  }
  if (tls_listen_fd_ >= 0) {
    ::close(tls_listen_fd_);
  }
}

std::string FormatAccessPoints(uint16_t http_port, uint16_t https_port) {
  std::string out;
  if (http_port != 0) {
    out.append("HTTP=").append(std::to_string(http_port));
  }
  if (https_port != 0) {
    out.append(out.empty() ? "" : ",").append("HTTPS=").append(std::to_string(https_port));
  }
  return out;
}

bool Worker::Start(std::string* error) {
  listen_fd_ = ListenForClients(options_.listen, /*limit_unsent=*/true, error);
  if (listen_fd_ < 0) {
    return false;
  }
  // HTTP only: its connections ack a request they wait for the rest of at once
  // (ClientConnection::Drive); a TLS handshake has no such hook.
  net::AckWithTheAnswer(listen_fd_);
  bound_ = net::LocalEndpoint(listen_fd_);
  if (options_.passthrough) {
    passthrough_fd_ =
        ListenForClients(options_.passthrough_listen, /*limit_unsent=*/false, error);
    if (passthrough_fd_ < 0) {
      *error = "--passthrough-listen: " + *error;
      return false;
    }
    passthrough_bound_ = net::LocalEndpoint(passthrough_fd_);
    loop_.Add(passthrough_fd_, EPOLLIN | EPOLLET, &passthrough_acceptor_);
  }
  if (server_tls_ != nullptr) {
    tls_listen_fd_ = ListenForClients(options_.tls_listen, /*limit_unsent=*/true, error);
    if (tls_listen_fd_ < 0) {
      *error = "--tls-listen " + options_.tls_listen.ToString() + ": " + *error;
      return false;
    }
    tls_bound_ = net::LocalEndpoint(tls_listen_fd_);
    loop_.Add(tls_listen_fd_, EPOLLIN | EPOLLET, &tls_acceptor_);
  }
  if (!options_.public_ports_given) {
    // The listeners as bound (port 0 got one): what clients reach without a
    // Service in between.
    options_.public_http_port = bound_.port();
    options_.public_https_port = server_tls_ != nullptr ? tls_bound_.port() : 0;
  }
  options_.access_points =
      FormatAccessPoints(options_.public_http_port, options_.public_https_port);
  // A secure-only URL over plain http is redirected to this port when its
  // mapping asks so (0: no https anywhere, so 403).
  router_.set_https_port(options_.public_https_port);
  loop_.Add(listen_fd_, EPOLLIN | EPOLLET, &acceptor_);
  access_log_.OnFirstLine(
      [](void* self) {
        auto* w = static_cast<Worker*>(self);
        if (w->flush_slow_) {
          w->flush_slow_ = false;
          w->loop_.Schedule(&w->flush_timer_, kFlushMs);
        }
      },
      this);
  loop_.Schedule(&flush_timer_, kFlushMs);
  thread_ = std::thread([this] { Run(); });
  return true;
}

void Worker::Run() {
  SetMetricsWorker(id_);  // this thread's counts go to its own metric slots
  // The io_uring now, not at the first connection: it never takes a
  // descriptor meant for a connection (nor fails for want of one, which
  // would leave the worker without it for good).
  (void)loop_.batching_sends();
  loop_.Run();
  // Stopped: close what is left. Connections are deleted with the loop's
  // graveyard only while it runs, so delete them here.
  for (ClientConnection* c : std::vector<ClientConnection*>(connections_)) {
    delete c;
  }
  connections_.clear();
  for (WorkerConnection* c : std::vector<WorkerConnection*>(others_)) {
    delete c;
  }
  others_.clear();
  for (auto& [key, bucket] : pool_) {
    for (UpstreamConnection* u : bucket.idle) {
      ::close(u->fd);
      delete u;
    }
  }
  bucket_cache_.fill(nullptr);
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
    passthrough_router_.Apply(table);
    router_.Apply(table);
    stats_.Apply(std::move(table), loop_.now_ms());
    table_metrics_ = std::move(metrics);
  });
}

void Worker::AcceptAll() {
  Accept(acceptor_);
  if (tls_listen_fd_ >= 0) {
    Accept(tls_acceptor_);
  }
  if (passthrough_fd_ >= 0) {
    Accept(passthrough_acceptor_);
  }
}

bool Worker::ProxyProtocolOn(Listener listener) const {
  switch (listener) {
    case Listener::kHttp:
      return options_.proxy_protocol_http;
    case Listener::kTls:
      return options_.proxy_protocol_tls;
    case Listener::kPassthrough:
      return options_.proxy_protocol_passthrough;
  }
  return false;
}

bool Worker::ShortOfDescriptorsLately() const {
  constexpr int64_t kNoGroupsAfterShortageMs = 10'000;
  return loop_.now_ms() - last_descriptor_shortage_ms_ < kNoGroupsAfterShortageMs;
}

net::BatchedAccept* Worker::AimAccepts(Acceptor& acceptor) {
  if (*acceptor.fd < 0) {
    return nullptr;
  }
  acceptor.accepts.Aim(*acceptor.fd,
                       ShortOfDescriptorsLately() ? 1 : net::BatchedAccept::kMaxRound);
  return &acceptor.accepts;
}

void Worker::Accept(Acceptor& acceptor) {
  if (AimAccepts(acceptor) == nullptr) {
    return;  // draining: the listener is closed
  }
  // Plain HTTP connections start in groups: their first reads (the request
  // usually came with the connection: TCP_DEFER_ACCEPT) go to the kernel in
  // one entry of the loop's io_uring instead of a recv(2) each.
  const bool group = acceptor.listener == Listener::kHttp && !ProxyProtocolOn(acceptor.listener) &&
                     loop_.batching_sends();
  ClientConnection* fresh[kStartGroup];
  size_t fresh_count = 0;
  for (;;) {
    if (fresh_count == kStartGroup) {
      StartGroup(fresh, fresh_count);
      fresh_count = 0;
    }
    // (Again: an accept or a connect may have run short of descriptors.)
    AimAccepts(acceptor);
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    // Through the loop's io_uring (a round of accepts per kernel entry, the
    // first in the entry of the batch's read-ahead), else accept4(2).
    int fd = loop_.Accept(&acceptor.accepts, &addr, &len);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        accept_retry_ms_ = 0;
        break;
      }
      if (errno == EMFILE || errno == ENFILE) {
        last_descriptor_shortage_ms_ = loop_.now_ms();
      }
      if (fresh_count > 0) {
        // An accept fails (for want of a descriptor, most likely): start the
        // connections accepted so far first (their upstream connects may
        // free descriptors of idle pooled connections, an eighth of them),
        // then try again. Unlike one-by-one starts they took their client
        // descriptors before any connected onwards, so a shortage answers
        // some of them 503: the shortage rule below starts connections one
        // by one for a while after.
        StartGroup(fresh, fresh_count);
        fresh_count = 0;
        continue;
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
      break;
    }
    accept_retry_ms_ = 0;
    if (connection_count_ >= options_.max_connections || draining_ || table_metrics_ == nullptr) {
      metrics_->connections_rejected.Inc();
      ::close(fd);
      continue;
    }
    net::Endpoint peer;
    peer.addr = addr;
    peer.len = len;
    ++connection_count_;
    metrics_->connections_accepted.Inc();
    metrics_->connections_active.Add(1);
    if (ProxyProtocolOn(acceptor.listener)) {
      auto* step =
          new ProxyHeaderStep(this, acceptor.listener, fd, net::AddressString(peer), peer.port());
      step->slot = others_.size();
      others_.push_back(step);
      step->Start();
      continue;
    }
    // Short of descriptors lately: a group would take them all for its
    // clients and leave none for their servers (every member answered
    // 503); one by one, each connects before the next is accepted (the
    // accepts then go one per round: AimAccepts).
    if (group && !ShortOfDescriptorsLately()) {
      fresh[fresh_count++] = NewClientConnection(std::make_unique<net::PlainTransport>(fd, &loop_),
                                                 net::AddressString(peer), peer.port());
      continue;
    }
    StartConnection(acceptor.listener, fd, net::AddressString(peer), peer.port());
  }
  StartGroup(fresh, fresh_count);
}

void Worker::StartGroup(ClientConnection* const* fresh, size_t count) {
  net::BatchedRecv* recvs[kStartGroup] = {};
  size_t wanted = 0;
  for (size_t i = 0; i < count; ++i) {
    if (net::BatchedRecv* recv = fresh[i]->ReadAhead(); recv != nullptr) {
      recvs[wanted++] = recv;
    }
  }
  // Those the loop could not read ahead (its arena full for this
  // iteration) read directly in Start.
  loop_.ReadAheadNow(recvs, wanted);
  for (size_t i = 0; i < count; ++i) {
    fresh[i]->Start();
  }
}

ClientConnection* Worker::NewClientConnection(std::unique_ptr<net::Transport> transport,
                                              std::string client_ip, uint16_t client_port) {
  auto* connection =
      new ClientConnection(this, std::move(transport), std::move(client_ip), client_port);
  connection->slot = connections_.size();
  connections_.push_back(connection);
  return connection;
}

void Worker::StartConnection(Listener listener, int fd, std::string client_ip,
                             uint16_t client_port) {
  if (draining_) {
    // A PROXY step finished after the drain began.
    ::close(fd);
    --connection_count_;
    metrics_->connections_active.Add(-1);
    return;
  }
  if (listener == Listener::kPassthrough) {
    auto* connection = new PassthroughConnection(this, fd, std::move(client_ip));
    connection->slot = others_.size();
    others_.push_back(connection);
    connection->Start();
    return;
  }
  // kHttp and kTls: the HTTP codec over a plain or TLS transport.
  std::unique_ptr<net::Transport> transport;
  if (listener == Listener::kTls) {
    transport = server_tls_->NewTransport(fd, &loop_);
    if (transport == nullptr) {
      WarnOutOfResources("start a TLS connection", ENOMEM);
      ::close(fd);
      --connection_count_;
      metrics_->connections_active.Add(-1);
      return;
    }
  } else {
    transport = std::make_unique<net::PlainTransport>(fd, &loop_);
  }
  NewClientConnection(std::move(transport), std::move(client_ip), client_port)->Start();
}

bool Worker::PublishBufferBytes() {
  // This thread's count (buffer.h) into the worker's slot of the gauge.
  const int64_t held = buffer_detail::held_bytes;
  if (held == published_buffer_bytes_) {
    return false;
  }
  metrics_->buffer_bytes.Add(static_cast<double>(held - published_buffer_bytes_));
  published_buffer_bytes_ = held;
  return true;
}

const GroupMetrics* Worker::GroupMetricsFor(const routing::PassthroughDecision& decision) const {
  if (decision.group_index < 0 || table_metrics_ == nullptr ||
      decision.table != passthrough_router_.table() ||
      static_cast<size_t>(decision.group_index) >= table_metrics_->groups.size()) {
    return nullptr;
  }
  return &table_metrics_->groups[decision.group_index];
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

void Worker::Detach(WorkerConnection* connection) {
  size_t slot = connection->slot;
  if (slot < others_.size() && others_[slot] == connection) {
    others_[slot] = others_.back();
    others_[slot]->slot = slot;
    others_.pop_back();
  }
}

void Worker::LingerThenClose(ClientConnection* from, net::Transport& transport, bool registered) {
  size_t slot = from->slot;
  if (slot < connections_.size() && connections_[slot] == from) {
    connections_[slot] = connections_.back();
    connections_[slot]->slot = slot;
    connections_.pop_back();
  }
  StartLingering(transport, registered);
}

void Worker::LingerThenClose(WorkerConnection* from, net::Transport& transport, bool registered) {
  Detach(from);
  StartLingering(transport, registered);
}

void Worker::StartLingering(net::Transport& transport, bool registered) {
  transport.Shutdown();  // TLS close_notify, ahead of the FIN
  const int fd = transport.fd();
  ::shutdown(fd, SHUT_WR);
  auto* lingering = new LingeringClose(this, fd, registered);
  lingering->slot = others_.size();
  others_.push_back(lingering);
  lingering->Start();
}

void Worker::ConnectionClosed(WorkerConnection* connection) {
  Detach(connection);
  --connection_count_;
  metrics_->connections_active.Add(-1);
  if (draining_) {
    CheckDrained();
  }
}

void Worker::HandOverToHttp2(ClientConnection* from, std::unique_ptr<net::Transport> transport,
                             std::string client_ip, uint16_t client_port,
                             std::string_view received, bool registered) {
  size_t slot = from->slot;
  if (slot < connections_.size() && connections_[slot] == from) {
    connections_[slot] = connections_.back();
    connections_[slot]->slot = slot;
    connections_.pop_back();
  }
  auto* connection =
      new Http2Connection(this, std::move(transport), std::move(client_ip), client_port, received,
                          registered);
  connection->slot = others_.size();
  others_.push_back(connection);
  connection->Start();
  if (draining_) {
    connection->BeginDrain();
  }
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

Worker::PoolBucket* Worker::FindBucket(std::string_view address, uint32_t port,
                                       std::string_view tls_key) {
  // Hashing the address string per request cost more than the rest of the
  // look-up: a cache slot from the port and the address's last bytes, the
  // hash map behind it.
  size_t slot = port;
  if (address.size() >= 2) {
    slot += static_cast<uint8_t>(address.back()) * 7u +
            static_cast<uint8_t>(address[address.size() - 2]) * 13u;
  }
  slot &= bucket_cache_.size() - 1;
  PoolBucket* bucket = bucket_cache_[slot];
  if (bucket != nullptr && bucket->port == port && bucket->address == address &&
      bucket->tls_key == tls_key) {
    return bucket;
  }
  auto it = pool_.find(PoolKey(address, port, tls_key));
  if (it == pool_.end() || it->second.address != address || it->second.port != port ||
      it->second.tls_key != tls_key) {
    return nullptr;
  }
  bucket_cache_[slot] = &it->second;
  return &it->second;
}

UpstreamConnection* Worker::TakeIdle(std::string_view address, uint32_t port,
                                     std::string_view tls_key) {
  PoolBucket* bucket = FindBucket(address, port, tls_key);
  if (bucket == nullptr) {
    return nullptr;
  }
  auto& idle = bucket->idle;
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
  if (connection->pool_bucket == nullptr) {
    auto& found = pool_[PoolKey(connection->address, connection->port, connection->tls_key)];
    if (found.address.empty()) {
      found.address = connection->address;
      found.port = connection->port;
      found.tls_key = connection->tls_key;
    }
    if (found.address == connection->address && found.port == connection->port &&
        found.tls_key == connection->tls_key) {
      connection->pool_bucket = &found;
    }
  }
  PoolBucket* bucket = connection->pool_bucket;
  if (draining_ || bucket == nullptr || options_.max_idle_upstream_per_server == 0) {
    connection->Close();
    return;
  }
  // Full: the connection idle longest goes (the bucket is in release order,
  // and taken from the back, so the front is the least recently used).
  if (bucket->idle.size() >= options_.max_idle_upstream_per_server) {
    UpstreamConnection* oldest = bucket->idle.front();
    bucket->idle.erase(bucket->idle.begin());
    oldest->Close();
  }
  bucket->idle.push_back(connection);
  loop_.Schedule(&connection->idle_timer, options_.upstream_idle_timeout_ms);
}

void Worker::ForgetIdle(UpstreamConnection* connection) {
  if (connection->pool_bucket == nullptr) {
    return;  // never released to the pool
  }
  auto& idle = connection->pool_bucket->idle;
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

size_t Worker::CloseOldestIdleUpstreams(size_t count) {
  // Each bucket is in release order (its front idle longest) and every idle
  // timer runs the same timeout from the release: the earliest deadline
  // among the fronts is the connection idle longest. A rare path (out of
  // descriptors), so a scan per connection is fine.
  size_t closed = 0;
  while (closed < count) {
    PoolBucket* oldest = nullptr;
    for (auto& [key, bucket] : pool_) {
      if (!bucket.idle.empty() &&
          (oldest == nullptr || bucket.idle.front()->idle_timer.deadline_ms() <
                                    oldest->idle.front()->idle_timer.deadline_ms())) {
        oldest = &bucket;
      }
    }
    if (oldest == nullptr) {
      break;
    }
    UpstreamConnection* c = oldest->idle.front();
    oldest->idle.erase(oldest->idle.begin());
    closed += c->closed ? 0 : 1;
    c->Close();
  }
  return closed;
}

int Worker::ConnectToServer(const net::Endpoint& endpoint, int* error_number) {
  int fd = net::ConnectNonBlocking(endpoint, error_number);
  if (fd >= 0 || (*error_number != EMFILE && *error_number != ENFILE)) {
    return fd;
  }
  last_descriptor_shortage_ms_ = loop_.now_ms();
  size_t idle = 0;
  for (const auto& [key, bucket] : pool_) {
    idle += bucket.idle.size();
  }
  size_t closed = CloseOldestIdleUpstreams(std::clamp<size_t>(idle / 8, 1, 32));
  if (closed == 0) {
    return fd;
  }
  if (loop_.now_ms() - last_pool_shed_log_ms_ >= 1000) {
    last_pool_shed_log_ms_ = loop_.now_ms();
    Log(LogLevel::kWarn, "proxy",
        "out of file descriptors: closed idle pooled upstream connections to connect",
        {{"closed", std::to_string(closed)},
         {"idle_left", std::to_string(idle - closed)},
         {"error", std::strerror(*error_number)},
         {"worker", std::to_string(id_)}});
  }
  return net::ConnectNonBlocking(endpoint, error_number);
}

void Worker::StopAccepting() {
  loop_.Cancel(&accept_retry_timer_);
  // Connections accepted through the ring and not started yet are closed
  // like those still queued on the listeners.
  for (Acceptor* acceptor : {&acceptor_, &tls_acceptor_, &passthrough_acceptor_}) {
    acceptor->accepts.Discard();
  }
  for (int* fd : {&listen_fd_, &tls_listen_fd_}) {
    if (*fd >= 0) {
      loop_.Remove(*fd);
      ::close(*fd);
      *fd = -1;
    }
  }
  if (passthrough_fd_ >= 0) {
    loop_.Remove(passthrough_fd_);
    ::close(passthrough_fd_);
    passthrough_fd_ = -1;
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
    for (WorkerConnection* c : std::vector<WorkerConnection*>(others_)) {
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
