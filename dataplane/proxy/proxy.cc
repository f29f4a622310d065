#include "dataplane/proxy/proxy.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iterator>
#include <utility>

#include "common/log.h"
#include "dataplane/net/socket.h"
#include "dataplane/routing/clock.h"

namespace kwd::proxy {

Proxy::Proxy(ProxyOptions options)
    : options_(std::move(options)),
      codec_(std::make_shared<session::AffinityCookieCodec>(options_.affinity_key)),
      clock_(std::make_shared<routing::SteadyClock>()) {
  metrics_.registry().AddCallbackGauge("kwd_proxy_ready",
                                       "1 once a snapshot has been applied.", {},
                                       [this] { return ready() ? 1.0 : 0.0; });
  metrics_.registry().AddCallbackGauge("kwd_proxy_workers", "Worker threads.", {},
                                       [this] { return static_cast<double>(workers_.size()); });
}

Proxy::~Proxy() {
  Shutdown(0);
  if (owns_access_log_fd_) {
    ::close(access_log_fd_);
  }
}

namespace {

// An IPv4-mapped IPv6 address ([::ffff:127.0.0.1]) as the IPv4 address.
net::Endpoint Unmapped(const net::Endpoint& e) {
  const auto& v6 = reinterpret_cast<const sockaddr_in6&>(e.addr);
  if (e.addr.ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
    return e;
  }
  net::Endpoint v4;
  auto& in = reinterpret_cast<sockaddr_in&>(v4.addr);
  in.sin_family = AF_INET;
  in.sin_port = v6.sin6_port;
  std::memcpy(&in.sin_addr, &v6.sin6_addr.s6_addr[12], 4);
  v4.len = sizeof in;
  return v4;
}

// Whether two of the proxy's listeners are bound to one address and port (an
// IPv4-mapped address counting as its IPv4 address). Their SO_REUSEPORT
// sockets would both bind, and the kernel would split the connections
// between them (the same address) or give all of them to one (an IPv4
// address and its mapped form). A wildcard and a specific address on one
// port are fine: the kernel gives each connection to the most specific
// listener (a passthrough VIP beside --tls-listen 0.0.0.0:443), and IPv4
// connections go to 0.0.0.0 rather than [::].
bool SameAddressAndPort(const net::Endpoint& mapped_a, const net::Endpoint& mapped_b) {
  const net::Endpoint a = Unmapped(mapped_a);
  const net::Endpoint b = Unmapped(mapped_b);
  return a.port() != 0 && a.ToString() == b.ToString();  // family, address and port
}

}  // namespace

bool Proxy::Start(std::string* error) {
  if (options_.access_log == "-") {
    access_log_fd_ = STDOUT_FILENO;
  } else if (options_.access_log != "off" && !options_.access_log.empty()) {
    access_log_fd_ = ::open(options_.access_log.c_str(),
                            O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (access_log_fd_ < 0) {
      *error = "cannot open access log " + options_.access_log + ": " + std::strerror(errno);
      return false;
    }
    owns_access_log_fd_ = true;
  }
  // An empty table until the first snapshot: every request gets a 503.
  routing::TableContext context{&sessions_, &health_};
  std::string build_error;
  auto empty = routing::RoutingTable::Build(v1::Snapshot(), context, &build_error);
  if (empty == nullptr) {
    *error = "cannot build the empty routing table: " + build_error;
    return false;
  }
  auto empty_metrics = metrics_.ForTable(*empty);
  {
    std::lock_guard lock(mu_);
    if (table_ == nullptr) {
      table_ = empty;
      table_metrics_ = empty_metrics;
    }
  }
  if (options_.tls_listen.len != 0) {
    server_tls_ = std::make_unique<tls::ServerTls>(options_.tls, metrics_.registry());
    if (!server_tls_->Load(error)) {
      return false;
    }
    {
      std::lock_guard lock(mu_);
      if (!certificates_.empty()) {
        server_tls_->SetSnapshotCertificates(certificates_);
      }
    }
    server_tls_->StartWatching();
  }
  // The workers' listeners use SO_REUSEPORT, which would let them join
  // another process's listeners on the same port and share its connections
  // unnoticed: such a port is an error, as it is without SO_REUSEPORT.
  const std::pair<const char*, const net::Endpoint*> listeners[] = {
      {"--listen", &options_.listen},
      {"--passthrough-listen", options_.passthrough ? &options_.passthrough_listen : nullptr},
      {"--tls-listen", server_tls_ != nullptr ? &options_.tls_listen : nullptr}};
  for (size_t i = 0; i < std::size(listeners); ++i) {
    const auto& [flag, endpoint] = listeners[i];
    if (endpoint == nullptr) {
      continue;
    }
    // Two of ours on one address and port would bind side by side as well.
    for (size_t j = 0; j < i; ++j) {
      if (listeners[j].second != nullptr && SameAddressAndPort(*listeners[j].second, *endpoint)) {
        *error = std::string(flag) + " " + endpoint->ToString() +
                 ": the same address and port as " + listeners[j].first + " " +
                 listeners[j].second->ToString() +
                 " (one listener would take its connections; give each its own port or address)";
        return false;
      }
    }
    if (!net::PortFree(*endpoint, error)) {
      *error = std::string(flag) + ": " + *error;
      return false;
    }
  }
  int count = std::max(1, options_.workers);
  for (int i = 0; i < count; ++i) {
    auto worker = std::make_unique<Worker>(i, options_, &metrics_, codec_, clock_, access_log_fd_,
                                           server_tls_.get());
    std::shared_ptr<const routing::RoutingTable> table;
    {
      std::lock_guard lock(mu_);
      table = table_;
    }
    worker->Apply(table, table == empty ? empty_metrics : metrics_.ForTable(*table));
    if (!worker->Start(error)) {
      return false;
    }
    if (i == 0) {
      bound_ = worker->bound();
      // Port 0: the other workers share the port the first one got.
      options_.listen = bound_;
      if (options_.passthrough) {
        passthrough_bound_ = worker->passthrough_bound();
        options_.passthrough_listen = passthrough_bound_;
      }
      tls_bound_ = worker->tls_bound();
      if (server_tls_ != nullptr) {
        options_.tls_listen = tls_bound_;
      }
      // The public ports as the first worker resolved them (the bound ones
      // unless --public-ports): what the admin port's explain redirects to.
      options_.public_http_port = worker->options().public_http_port;
      options_.public_https_port = worker->options().public_https_port;
    }
    workers_.push_back(std::move(worker));
  }
  return true;
}

bool Proxy::ApplySnapshot(const v1::Snapshot& snapshot, std::string* error) {
  auto start = std::chrono::steady_clock::now();
  routing::TableContext context{&sessions_, &health_};
  context.programs = &programs_;
  // Each re-encrypting group's TLS settings (SSL_CTX, client certificate)
  // are built here, once per snapshot, and swapped in with the table.
  context.upstream_tls = [this](const v1::Group& group) {
    return tls::UpstreamTls::Build(group, options_.upstream_tls);
  };
  auto table = routing::RoutingTable::Build(snapshot, context, error);
  if (table == nullptr) {
    metrics_.snapshot_rejects.Inc();
    return false;
  }
  auto table_metrics = metrics_.ForTable(*table);
  for (auto& worker : workers_) {
    worker->Apply(table, table_metrics);
  }
  // UrlMapping.spec.tls certificates join the SNI table of --tls-listen.
  if (server_tls_ != nullptr) {
    server_tls_->SetSnapshotCertificates(snapshot.certificates());
  } else if (!snapshot.certificates().empty() && options_.tls_listen.len == 0 &&
             !certificates_ignored_logged_.exchange(true)) {
    Log(LogLevel::kWarn, "proxy",
        "the snapshot carries TLS certificates (UrlMapping.spec.tls) but this proxy has no "
        "--tls-listen; they are ignored",
        {{"certificates", std::to_string(snapshot.certificates_size())}});
  }
  std::string previous;
  {
    std::lock_guard lock(mu_);
    previous = table_ != nullptr ? table_->version() : "";
    table_ = table;
    table_metrics_ = table_metrics;
    ready_ = true;
    if (server_tls_ == nullptr && options_.tls_listen.len != 0) {
      certificates_ = snapshot.certificates();  // applied before Start
    }
    if (on_table_applied_) {
      on_table_applied_();
    }
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_.snapshot_apply_seconds.Observe(seconds);
  metrics_.snapshot_applies.Inc();
  // The whole version, as kwd_controller_snapshot_info has it, so the two
  // join on `version`; only the current one is exported.
  version_info_ = &metrics_.registry().GetGauge(
      "kwd_proxy_snapshot_info", "The applied snapshot (value 1), labelled with its version.",
      {{"version", snapshot.version()}});
  version_info_->Set(1);
  metrics_.registry().RetainLabelValues("kwd_proxy_snapshot_info", "version",
                                        {snapshot.version()});
  metrics_.registry().GetGauge("kwd_proxy_snapshot_applied_timestamp_seconds",
                               "Unix time the current snapshot was applied.")
      .Set(static_cast<double>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count()));
  Log(LogLevel::kInfo, "proxy", "snapshot applied",
      {{"version", snapshot.version()},
       {"previous", previous},
       {"groups", std::to_string(snapshot.groups_size())},
       {"virtual_hosts", std::to_string(snapshot.virtual_hosts_size())}});
  return true;
}

void Proxy::Shutdown(int64_t grace_ms) {
  for (auto& worker : workers_) {
    worker->Drain(grace_ms);
  }
  for (auto& worker : workers_) {
    worker->Join();
  }
}

bool Proxy::ready() const {
  std::lock_guard lock(mu_);
  return ready_;
}

std::string Proxy::version() const {
  std::lock_guard lock(mu_);
  return table_ != nullptr ? table_->version() : "";
}

std::shared_ptr<const routing::RoutingTable> Proxy::table() const {
  std::lock_guard lock(mu_);
  return table_;
}

std::shared_ptr<const routing::RoutingTable> Proxy::table(
    std::shared_ptr<const TableMetrics>* metrics) const {
  std::lock_guard lock(mu_);
  *metrics = table_metrics_;
  return table_;
}

}  // namespace kwd::proxy
