#pragma once

// A worker: one thread, one event loop, its own SO_REUSEPORT listener, its
// own Router (balancer state), upstream keep-alive pool and access-log
// buffer. Workers share only read-only tables and atomics, so the request
// path takes no lock.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dataplane/net/event_loop.h"
#include "dataplane/net/socket.h"
#include "dataplane/net/transport.h"
#include "dataplane/proxy/access_log.h"
#include "dataplane/proxy/options.h"
#include "dataplane/proxy/proxy_metrics.h"
#include "dataplane/proxy/server_stats.h"
#include "dataplane/routing/passthrough_router.h"
#include "dataplane/routing/router.h"

namespace kwd::proxy {

class ClientConnection;
class Http2Connection;
class UpstreamConnection;
class Worker;

// Whoever an UpstreamConnection reports its readiness to while it carries a
// request: the Exchange of an HTTP/1.1 connection or of an HTTP/2 stream.
class UpstreamOwner {
 public:
  virtual void OnUpstreamIo(uint32_t events) = 0;

 protected:
  ~UpstreamOwner() = default;
};

// The listeners a worker accepts on.
enum class Listener : uint8_t { kHttp, kTls, kPassthrough };
// "http", "tls", "passthrough".
std::string_view ListenerName(Listener listener);

// A connection the worker owns besides the HTTP ClientConnection: TLS
// passthrough tunnels and the PROXY protocol step that runs before either.
class WorkerConnection : public net::IoHandler, public net::Deletable {
 public:
  ~WorkerConnection() override = default;
  virtual void Start() = 0;
  // The worker is draining: end at the next safe point (or at the deadline).
  virtual void BeginDrain() = 0;
  size_t slot = 0;  // index in the worker's list
};

// The worker's idle upstream connections to one address, port and TLS key.
struct UpstreamPoolBucket {
  std::string address;
  uint32_t port = 0;
  std::string tls_key;
  std::vector<UpstreamConnection*> idle;
};

// An upstream connection. Owned by its client connection while it carries a
// request, by the pool while idle.
class UpstreamConnection final : public net::IoHandler, public net::Deletable {
 public:
  UpstreamConnection(Worker* worker, int fd, std::string_view address, uint32_t port);
  ~UpstreamConnection() override;

  void OnIo(uint32_t events) override;
  net::BatchedRecv* ReadAhead() override;
  // Removes from epoll, closes the fd and deletes later. `dropped`: bytes
  // for the server not sent; with those (or queued ones the kernel cannot
  // take) the close is a reset, not a FIN (Transport::BeforeClose).
  void Close(size_t dropped = 0);

  Worker* worker;
  int fd;
  // "" for plain; else the group's UpstreamTls::key(): a pooled connection
  // is reused only with the same TLS settings. `tls` keeps the settings (and
  // their SSL_CTX) alive while the connection lives
  // (declared before `transport`: destroyed after it).
  std::string tls_key;
  std::shared_ptr<const tls::UpstreamTls> tls;
  // Plain unless the group re-encrypts; the client connection reads and
  // writes through it.
  std::unique_ptr<net::Transport> transport;
  std::string address;
  uint32_t port;
  bool connecting = true;
  UpstreamOwner* owner = nullptr;  // null while idle in the pool
  net::Timer idle_timer;
  bool closed = false;
  // The pool bucket of this address, port and TLS key once the pool has
  // seen the connection (buckets live as long as the worker).
  UpstreamPoolBucket* pool_bucket = nullptr;
};

class Worker {
 public:
  // `server_tls` (owned by the proxy, may be null) terminates TLS on
  // options.tls_listen.
  Worker(int id, const ProxyOptions& options, ProxyMetrics* metrics,
         std::shared_ptr<const session::AffinityCookieCodec> codec,
         std::shared_ptr<const routing::Clock> clock, int access_log_fd,
         tls::ServerTls* server_tls = nullptr);
  ~Worker();

  // Opens the listeners (SO_REUSEPORT) and starts the thread.
  bool Start(std::string* error);
  // Thread-safe: the worker switches tables between requests.
  void Apply(std::shared_ptr<const routing::RoutingTable> table,
             std::shared_ptr<const TableMetrics> metrics);
  // Thread-safe: stop accepting, let in-flight requests finish (up to
  // `grace_ms`), then stop the loop.
  void Drain(int64_t grace_ms);
  void Join();
  // Runs `fn` on the worker's thread (admin state, tests).
  void Post(std::function<void()> fn) { loop_.Post(std::move(fn)); }

  int id() const { return id_; }
  const net::Endpoint& bound() const { return bound_; }
  const net::Endpoint& passthrough_bound() const { return passthrough_bound_; }
  const net::Endpoint& tls_bound() const { return tls_bound_; }
  const routing::Router& router() const { return router_; }
  size_t connection_count() const { return connection_count_; }

  // ---- used by connections, on the worker thread ----
  net::EventLoop& loop() { return loop_; }
  const ProxyOptions& options() const { return options_; }
  ProxyMetrics& metrics() { return *metrics_; }
  routing::Router& router() { return router_; }
  const std::shared_ptr<const TableMetrics>& table_metrics() const { return table_metrics_; }
  AccessLog& access_log() { return access_log_; }
  // Per-server traffic for the admin page (read it on this thread: Post).
  WorkerStats& stats() { return stats_; }
  const WorkerStats& stats() const { return stats_; }
  bool draining() const { return draining_; }

  // An idle pooled connection to address:port with TLS settings `tls_key`
  // ("" plain), or null.
  UpstreamConnection* TakeIdle(std::string_view address, uint32_t port,
                               std::string_view tls_key = {});
  // Parks a healthy keep-alive connection for upstream_idle_timeout_ms; a full
  // pool (max_idle_upstream_per_server) closes its oldest idle one first.
  void ReleaseIdle(UpstreamConnection* connection);
  void ForgetIdle(UpstreamConnection* connection);
  void ConnectionClosed(ClientConnection* connection);
  void ConnectionClosed(WorkerConnection* connection);
  // The HTTP/1.1 connection found HTTP/2 (ALPN h2, or the h2c preface with
  // --h2c): an Http2Connection takes over its transport and the bytes it
  // already read (`registered`: the descriptor is in epoll already). The
  // connection stays counted; `from` is deleted later.
  void HandOverToHttp2(ClientConnection* from, std::unique_ptr<net::Transport> transport,
                       std::string client_ip, uint16_t client_port, std::string_view received,
                       bool registered);
  // Takes `connection` off the worker's list without uncounting it.
  void Detach(WorkerConnection* connection);
  // Ends a client connection with a lingering close (lingering_close.h):
  // `transport` has handed every byte for the client to the kernel
  // (BeforeClose). Its TLS close_notify goes, the socket's write side is shut
  // down, and a LingeringClose takes the descriptor (`registered`: in epoll
  // already), counted in the connection's place. `from` is taken off the
  // worker's list without being uncounted; its owner deletes it later and
  // closes nothing.
  void LingerThenClose(ClientConnection* from, net::Transport& transport, bool registered);
  void LingerThenClose(WorkerConnection* from, net::Transport& transport, bool registered);
  // Starts the connection for `listener` on an accepted socket whose client
  // is `client_ip` (the peer, or what its PROXY protocol header said). The
  // connection is already counted.
  void StartConnection(Listener listener, int fd, std::string client_ip, uint16_t client_port);
  routing::PassthroughRouter& passthrough_router() { return passthrough_router_; }
  // The metrics of a passthrough decision's group; null when the decision was
  // made on a table other than the current one.
  const GroupMetrics* GroupMetricsFor(const routing::PassthroughDecision& decision) const;
  // Logs that `what` failed for want of descriptors (or memory, ports), at
  // most once a second per worker.
  void WarnOutOfResources(std::string_view what, int error_number);
  // net::ConnectNonBlocking to a server. Out of descriptors (EMFILE,
  // ENFILE), the pool's longest-idle connections give theirs up (an eighth
  // of them, 1 to 32, as nginx frees reusable connections) and the connect
  // is tried once more; logged at most once a second.
  int ConnectToServer(const net::Endpoint& endpoint, int* error_number);

 private:
  struct Acceptor final : net::IoHandler {
    Worker* worker;
    Listener listener = Listener::kHttp;
    int* fd = nullptr;
    // The listener's accepts through the loop's io_uring.
    net::BatchedAccept accepts;
    void OnIo(uint32_t events) override { worker->Accept(*this); }
    net::BatchedAccept* AcceptAhead() override { return worker->AimAccepts(*this); }
  };
  using PoolBucket = UpstreamPoolBucket;
  // The bucket for these, from a small direct-mapped cache in front of
  // pool_ (checked against the bucket's own strings), or nullptr.
  PoolBucket* FindBucket(std::string_view address, uint32_t port, std::string_view tls_key);

  void Run();
  void Accept(Acceptor& acceptor);
  // Aims the acceptor's accepts at its listener (null: closed), one at a
  // time while descriptors ran short lately.
  net::BatchedAccept* AimAccepts(Acceptor& acceptor);
  // Short of descriptors lately: connections are accepted and started one
  // by one (each connects before the next is accepted).
  bool ShortOfDescriptorsLately() const;
  // Plain HTTP connections an Accept starts together (StartGroup).
  static constexpr size_t kStartGroup = 64;
  // Makes the first reads of `fresh` (accepted, not started) in one kernel
  // entry (EventLoop::ReadAheadNow), then starts them: each Start reads
  // what came.
  void StartGroup(ClientConnection* const* fresh, size_t count);
  // A connection on the worker's list, not started yet.
  ClientConnection* NewClientConnection(std::unique_ptr<net::Transport> transport,
                                        std::string client_ip, uint16_t client_port);
  void AcceptAll();
  void RetryAcceptLater();
  bool ProxyProtocolOn(Listener listener) const;
  // Closes every idle pooled upstream connection; returns how many were open.
  size_t CloseIdleUpstreams();
  // Closes up to `count` idle pooled upstream connections, those idle
  // longest first; returns how many it closed.
  size_t CloseOldestIdleUpstreams(size_t count);
  void StopAccepting();
  void CheckDrained();
  void StartLingering(net::Transport& transport, bool registered);
  static uint64_t PoolKey(std::string_view address, uint32_t port, std::string_view tls_key);

  int id_;
  ProxyOptions options_;
  ProxyMetrics* metrics_;
  net::EventLoop loop_;
  routing::Router router_;
  routing::PassthroughRouter passthrough_router_;
  std::shared_ptr<const TableMetrics> table_metrics_;
  AccessLog access_log_;
  WorkerStats stats_;
  int listen_fd_ = -1;
  net::Endpoint bound_;
  Acceptor acceptor_;
  int passthrough_fd_ = -1;
  net::Endpoint passthrough_bound_;
  Acceptor passthrough_acceptor_;
  std::vector<WorkerConnection*> others_;  // passthrough and PROXY-step connections
  tls::ServerTls* server_tls_;
  int tls_listen_fd_ = -1;
  net::Endpoint tls_bound_;
  Acceptor tls_acceptor_;
  std::thread thread_;
  size_t connection_count_ = 0;
  std::vector<ClientConnection*> connections_;  // for draining; swap-removed
  std::unordered_map<uint64_t, PoolBucket> pool_;
  std::array<PoolBucket*, 16> bucket_cache_{};
  bool draining_ = false;
  int64_t drain_deadline_ms_ = 0;
  // Flushes the access log and publishes the buffer gauge: every 100 ms
  // while the gauge moves or lines are logged, once a second when neither
  // does (an idle worker does not wake 10 times a second for nothing); the
  // first line logged after that brings the 100 ms back.
  net::Timer flush_timer_;
  bool flush_slow_ = false;
  static constexpr int64_t kFlushMs = 100;
  static constexpr int64_t kIdleFlushMs = 1000;
  // kwd_proxy_buffer_bytes: this worker's buffer storage, as last published
  // (with the access log's flush).
  int64_t published_buffer_bytes_ = 0;
  // Whether the count moved since it was last published.
  bool PublishBufferBytes();
  net::Timer drain_timer_;
  // accept() failed for want of descriptors: the listener is edge-triggered,
  // so nothing wakes it when they free up; this timer tries again.
  net::Timer accept_retry_timer_;
  int64_t accept_retry_ms_ = 0;  // the current back-off, 0 while accepting works
  int64_t last_resource_warning_ms_ = -1'000'000;
  int64_t last_pool_shed_log_ms_ = -1'000'000;
  // When an accept or connect last ran out of descriptors: Accept starts no
  // groups for a while after (each accepted connection needs one more
  // descriptor for its server, which a group's later members would not get).
  int64_t last_descriptor_shortage_ms_ = -1'000'000'000;
};

}  // namespace kwd::proxy
