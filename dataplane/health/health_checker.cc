#include "dataplane/health/health_checker.h"

#include <malloc.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "dataplane/net/socket.h"
#include "dataplane/net/transport.h"
#include "dataplane/routing/server_health_registry.h"
#include "dataplane/tls/tls_transport.h"
#include "dataplane/tls/upstream_tls.h"

namespace kwd::health {
namespace {

constexpr double kRttAlpha = 0.3;
constexpr size_t kMaxResponseHead = 8192;  // a status line longer than this is not one

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What to check on one server, and its consecutive results. Shared with the
// probe in flight so a server removed by a new snapshot mid-check is safe.
struct Target {
  std::string group;
  std::string server;
  std::string address;
  uint32_t port = 0;
  std::string path;
  int64_t interval_us = 0;
  int64_t timeout_us = 0;
  uint32_t unhealthy_threshold = kDefaultUnhealthyThreshold;
  uint32_t healthy_threshold = kDefaultHealthyThreshold;
  std::shared_ptr<balancer::ServerHealth> health;
  // Re-encrypting groups are checked over TLS with the group's settings
  // (never in clear); `tls` null or with an error: every check fails.
  // Passthrough groups over TLS without verification (GroupChecks).
  CheckTransport transport = CheckTransport::kHttp;
  std::string server_name;  // kTls: SNI and Host; "" for the address
  std::shared_ptr<const tls::UpstreamTls> tls;

  uint32_t consecutive_successes = 0;
  uint32_t consecutive_failures = 0;
  int64_t next_due_us = 0;
  bool in_flight = false;
  bool removed = false;
};

struct Probe {
  enum class Phase { kConnecting, kHandshaking, kSending, kReading };

  std::shared_ptr<Target> target;
  int fd = -1;
  // The settings the handshake uses, kept while it lives (a new snapshot
  // replaces the target's).
  std::shared_ptr<const tls::UpstreamTls> tls;
  // Plain or TLS over fd (set once connected); `tls_transport` is the same
  // object when it is TLS (for the direction the handshake waits on).
  std::unique_ptr<net::Transport> transport;
  tls::TlsTransport* tls_transport = nullptr;
  bool verify = false;  // TLS: the server's certificate is verified
  Phase phase = Phase::kConnecting;
  std::string request;
  size_t sent = 0;
  std::string response;
  int64_t start_us = 0;
  int64_t deadline_us = 0;
  bool done = false;
};

std::string HostHeader(const std::string& address, uint32_t port) {
  bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

}  // namespace

int ParseStatusLine(std::string_view response) {
  size_t line_end = response.find("\r\n");
  if (line_end == std::string_view::npos) {
    if (response.size() >= kMaxResponseHead) {
      return -1;
    }
    // A prefix that can still become "HTTP/1.x ": wait for more.
    std::string_view expected = "HTTP/1.";
    size_t n = std::min(response.size(), expected.size());
    return response.substr(0, n) == expected.substr(0, n) ? 0 : -1;
  }
  std::string_view line = response.substr(0, line_end);
  // "HTTP/1.x SSS" then optionally " reason".
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ' ||
      (line.size() > 12 && line[12] != ' ')) {
    return -1;
  }
  int status = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') {
      return -1;
    }
    status = status * 10 + (line[i] - '0');
  }
  return status >= 100 ? status : -1;
}

std::string_view CheckTransportName(CheckTransport transport) {
  switch (transport) {
    case CheckTransport::kTls:
      return "tls";
    case CheckTransport::kTlsVerified:
      return "tls-verified";
    case CheckTransport::kHttp:
      break;
  }
  return "http";
}

std::vector<GroupCheck> GroupChecks(const routing::RoutingTable& table) {
  const size_t count = table.groups().size();
  std::vector<GroupCheck> checks(count);
  // Exact host names naming each group as its passthrough group, and
  // whether a wildcard or the any-host entry does too.
  std::vector<std::vector<std::string_view>> exact_hosts(count);
  auto valid = [count](int index) { return index >= 0 && static_cast<size_t>(index) < count; };
  for (const routing::VirtualHostEntry& vhost : table.virtual_hosts()) {
    for (int index : {vhost.default_abap_group, vhost.default_java_group}) {
      if (valid(index)) {
        checks[index].http = true;
      }
    }
    for (const routing::RuleEntry& rule : vhost.rules) {
      if (valid(rule.group)) {
        checks[rule.group].http = true;
      }
    }
    if (valid(vhost.passthrough_group)) {
      checks[vhost.passthrough_group].passthrough = true;
      if (!vhost.host.empty() && !vhost.host.starts_with("*.")) {
        std::vector<std::string_view>& hosts = exact_hosts[vhost.passthrough_group];
        if (std::find(hosts.begin(), hosts.end(), vhost.host) == hosts.end()) {
          hosts.push_back(vhost.host);
        }
      }
    }
  }
  for (size_t g = 0; g < count; ++g) {
    GroupCheck& check = checks[g];
    if (table.groups()[g].reencrypt) {
      check.transport = CheckTransport::kTlsVerified;
    } else if (check.passthrough && !check.http) {
      check.transport = CheckTransport::kTls;
      if (exact_hosts[g].size() == 1) {
        check.server_name = std::string(exact_hosts[g].front());
      }
    }
  }
  return checks;
}

GroupCheck GroupCheckFor(const routing::RoutingTable& table, size_t group_index) {
  std::vector<GroupCheck> checks = GroupChecks(table);
  return group_index < checks.size() ? checks[group_index] : GroupCheck{};
}

// The checker thread's state; lives on that thread only.
class HealthChecker::Loop {
 public:
  explicit Loop(HealthChecker* owner) : owner_(owner) {}

  ~Loop() {
    for (Probe& probe : probes_) {
      if (probe.fd >= 0) {
        ::close(probe.fd);
      }
    }
  }

  void Run() {
    std::vector<pollfd> fds;
    while (!owner_->stop_.load(std::memory_order_acquire)) {
      int64_t now = NowUs();
      if (owner_->tables_changed_.exchange(false, std::memory_order_acq_rel) ||
          now >= next_table_read_us_) {
        Refresh(owner_->tables_());
        next_table_read_us_ = now + owner_->options_.table_poll_ms * 1000;
      }
      StartDueProbes(now);

      fds.clear();
      fds.push_back(pollfd{owner_->wake_fd_, POLLIN, 0});
      int64_t wake_at = next_table_read_us_;
      for (const Probe& probe : probes_) {
        short events = probe.phase == Probe::Phase::kReading ? POLLIN : POLLOUT;
        if (probe.phase == Probe::Phase::kHandshaking) {
          events = SSL_want_write(probe.tls_transport->ssl()) ? POLLOUT : POLLIN;
        }
        fds.push_back(pollfd{probe.fd, events, 0});
        wake_at = std::min(wake_at, probe.deadline_us);
      }
      if (probes_.size() < owner_->options_.max_concurrent_checks) {
        for (const auto& [key, target] : targets_) {
          if (!target->in_flight) {
            wake_at = std::min(wake_at, target->next_due_us);
          }
        }
      }
      int64_t wait_us = std::max<int64_t>(wake_at - NowUs(), 0);
      int timeout_ms = static_cast<int>(std::min<int64_t>((wait_us + 999) / 1000, 60'000));
      int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0 && errno != EINTR) {
        Log(LogLevel::kError, "health", "poll failed", {{"error", std::strerror(errno)}});
        return;
      }
      if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
        uint64_t value;
        ssize_t ignored = ::read(owner_->wake_fd_, &value, sizeof value);
        (void)ignored;
      }
      now = NowUs();
      // fds[i + 1] belongs to probes_[i]: probes are only added after this.
      for (size_t i = 0; i < probes_.size(); ++i) {
        Probe& probe = probes_[i];
        if (ready > 0 && fds[i + 1].revents != 0) {
          Advance(probe, fds[i + 1].revents);
        }
        if (!probe.done && NowUs() >= probe.deadline_us) {
          Finish(probe, false,
                 "timeout after " + std::to_string(probe.target->timeout_us / 1000) + " ms");
        }
      }
      std::erase_if(probes_, [](const Probe& probe) { return probe.done; });
    }
  }

 private:
  void Refresh(const std::shared_ptr<const routing::RoutingTable>& table) {
    if (table == nullptr || table == table_) {
      return;
    }
    table_ = table;
    ApplyTable();
    // This thread has its own malloc arena, and a table is applied seldom:
    // give the pages the rebuild freed back (about 120 KiB idle with 100
    // groups) instead of keeping them resident until the next snapshot.
    ::malloc_trim(0);
  }

  void ApplyTable() {
    const std::shared_ptr<const routing::RoutingTable>& table = table_;
    const HealthCheckerOptions& options = owner_->options_;
    std::unordered_map<std::string, std::shared_ptr<Target>> next;
    std::vector<std::string> live_groups;
    std::vector<std::string> live_servers;
    std::vector<GroupCheck> checks = GroupChecks(*table);
    for (size_t g = 0; g < table->groups().size(); ++g) {
      const routing::GroupEntry& group = table->groups()[g];
      live_groups.push_back(group.key);
      const v1::HealthCheck& check = group.health_check;
      const GroupCheck& how = checks[g];
      if (how.passthrough && how.http && !group.reencrypt) {
        Log(LogLevel::kWarn, "health",
            "group serves both HTTP requests and TLS passthrough: its health checks are plain "
            "HTTP (its servers must answer HTTP on that port; give passthrough its own group)",
            {{"group", group.key}});
      }
      for (const routing::ServerEntry& server : group.servers) {
        live_servers.push_back(server.name);
        std::string key = routing::ServerHealthRegistry::Key(group.key, server.name);
        std::shared_ptr<Target> target;
        if (auto it = targets_.find(key); it != targets_.end()) {
          target = it->second;
        } else {
          target = std::make_shared<Target>();
          target->group = group.key;
          target->server = server.name;
          target->next_due_us = 0;  // a new server is checked at once
        }
        target->address = server.address;
        target->port = server.port;
        target->transport = how.transport;
        target->server_name = how.server_name;
        target->tls = group.tls;
        target->path = !check.path().empty()         ? check.path()
                       : group.kind == v1::KIND_ABAP ? std::string(kDefaultAbapHealthPath)
                                                     : std::string(kDefaultJavaHealthPath);
        int64_t interval_s =
            check.interval_seconds() > 0 ? check.interval_seconds() : kDefaultIntervalSeconds;
        int64_t timeout_s =
            check.timeout_seconds() > 0 ? check.timeout_seconds() : kDefaultTimeoutSeconds;
        target->interval_us =
            (options.interval_override_ms > 0 ? options.interval_override_ms : interval_s * 1000) *
            1000;
        target->timeout_us =
            (options.timeout_override_ms > 0 ? options.timeout_override_ms : timeout_s * 1000) *
            1000;
        target->unhealthy_threshold = check.unhealthy_threshold() > 0 ? check.unhealthy_threshold()
                                                                      : kDefaultUnhealthyThreshold;
        target->healthy_threshold =
            check.healthy_threshold() > 0 ? check.healthy_threshold() : kDefaultHealthyThreshold;
        if (target->health != server.health) {
          // New server, or one that left and came back: the registry made
          // fresh state, so the exported gauge must read that.
          target->health = server.health;
          std::shared_ptr<balancer::ServerHealth> health = server.health;
          owner_->registry_->AddCallbackGauge(
              "kwd_proxy_server_up",
              "1 while the server takes new requests (health checks and passive marking).",
              {{"group", group.key}, {"server", server.name}}, [health] {
                return health != nullptr && health->healthy.load(std::memory_order_relaxed) ? 1.0
                                                                                            : 0.0;
              });
        }
        next.emplace(std::move(key), std::move(target));
      }
    }
    for (auto& [key, target] : targets_) {
      if (!next.contains(key)) {
        target->removed = true;
      }
    }
    targets_ = std::move(next);
    std::sort(live_groups.begin(), live_groups.end());
    std::sort(live_servers.begin(), live_servers.end());
    owner_->registry_->RetainLabelValues("kwd_proxy_server_up", "group", live_groups);
    owner_->registry_->RetainLabelValues("kwd_proxy_server_up", "server", live_servers);
  }

  void StartDueProbes(int64_t now) {
    for (auto& [key, target] : targets_) {
      if (probes_.size() >= owner_->options_.max_concurrent_checks) {
        return;
      }
      if (target->in_flight || now < target->next_due_us) {
        continue;
      }
      target->in_flight = true;
      // The next check is due one interval after this one started; a check
      // slower than the interval delays the next one (in_flight).
      target->next_due_us = now + target->interval_us;
      Probe probe;
      probe.target = target;
      probe.start_us = now;
      probe.deadline_us = now + target->timeout_us;
      net::Endpoint endpoint;
      if (target->port == 0 || target->port > 65535 ||
          !net::MakeEndpoint(target->address, static_cast<uint16_t>(target->port), &endpoint)) {
        Finish(probe, false, "address is not numeric: " + target->address);
        continue;
      }
      int error_number = 0;
      probe.fd = net::ConnectNonBlocking(endpoint, &error_number);
      if (probe.fd < 0 && net::IsLocalResourceError(error_number)) {
        // Out of descriptors here says nothing about the server: no result,
        // the check runs again next interval.
        target->in_flight = false;
        if (now - last_resource_warning_us_ >= 1'000'000) {  // one line a second at most
          last_resource_warning_us_ = now;
          Log(LogLevel::kWarn, "health", "check skipped: out of file descriptors or ports",
              {{"group", target->group},
               {"server", target->server},
               {"error", std::strerror(error_number)}});
        }
        continue;
      }
      if (probe.fd < 0) {
        Finish(probe, false, std::string("connect: ") + std::strerror(error_number));
        continue;
      }
      probe.request = "GET " + target->path + " HTTP/1.1\r\nHost: " +
                      (target->transport == CheckTransport::kTls && !target->server_name.empty()
                           ? target->server_name
                           : HostHeader(target->address, target->port)) +
                      "\r\nUser-Agent: kwd-health-check\r\nAccept: */*\r\nConnection: "
                      "close\r\n\r\n";
      probes_.push_back(std::move(probe));
    }
  }

  void Advance(Probe& probe, short revents) {
    if (probe.phase == Probe::Phase::kConnecting) {
      int err = net::SocketError(probe.fd);
      if (err != 0 || (revents & (POLLERR | POLLHUP)) != 0) {
        Finish(probe, false, std::string("connect: ") + std::strerror(err != 0 ? err : ECONNRESET));
        return;
      }
      const Target& target = *probe.target;
      if (target.transport == CheckTransport::kHttp) {
        probe.transport = std::make_unique<net::PlainTransport>(probe.fd);
        probe.phase = Probe::Phase::kSending;
      } else {
        probe.verify = target.transport == CheckTransport::kTlsVerified;
        std::shared_ptr<const tls::UpstreamTls> settings =
            probe.verify ? target.tls : UnverifiedTls();
        std::shared_ptr<SSL_CTX> ctx = settings != nullptr ? settings->Context() : nullptr;
        std::string error =
            settings == nullptr ? "no TLS settings for the group" : settings->error();
        std::string_view name = !probe.verify         ? std::string_view(target.server_name)
                                : settings != nullptr ? settings->ServerName(target.address)
                                                      : std::string_view();
        if (name.empty()) {
          name = target.address;
        }
        std::unique_ptr<tls::TlsTransport> transport;
        if (ctx != nullptr) {
          transport = tls::TlsTransport::Client(ctx.get(), probe.fd, name, &error);
        }
        if (transport == nullptr) {
          Finish(probe, false, "TLS: " + error);
          return;
        }
        settings->OfferSession(transport->ssl(), target.address, target.port);
        probe.tls = std::move(settings);
        probe.tls_transport = transport.get();
        probe.transport = std::move(transport);
        probe.phase = Probe::Phase::kHandshaking;
      }
    }
    if (probe.phase == Probe::Phase::kHandshaking) {
      switch (probe.transport->Handshake()) {
        case net::Transport::HandshakeStatus::kWantIo:
          return;
        case net::Transport::HandshakeStatus::kFailed: {
          long verify = probe.verify ? SSL_get_verify_result(probe.tls_transport->ssl())
                                     : static_cast<long>(X509_V_OK);
          Finish(probe, false,
                 verify != X509_V_OK
                     ? std::string("TLS: the server's certificate did not verify: ") +
                           X509_verify_cert_error_string(verify)
                     : "TLS handshake failed: " + std::string(probe.transport->error()));
          return;
        }
        case net::Transport::HandshakeStatus::kDone:
          probe.phase = Probe::Phase::kSending;
          break;
      }
    }
    if (probe.phase == Probe::Phase::kSending) {
      while (probe.sent < probe.request.size()) {
        ssize_t n = probe.transport->Write(probe.request.data() + probe.sent,
                                           probe.request.size() - probe.sent);
        if (n == net::Transport::kWouldBlock) {
          return;
        }
        if (n < 0) {
          Finish(probe, false, "send failed: " + std::string(probe.transport->error()));
          return;
        }
        probe.sent += static_cast<size_t>(n);
      }
      probe.phase = Probe::Phase::kReading;
      return;  // wait for POLLIN
    }
    char buffer[2048];
    while (true) {
      bool drained = false;
      ssize_t n = probe.transport->Read(buffer, sizeof buffer, &drained);
      if (n == net::Transport::kWouldBlock) {
        return;
      }
      if (n < 0) {
        Finish(probe, false, "recv failed: " + std::string(probe.transport->error()));
        return;
      }
      if (n == 0) {
        Finish(probe, false, "connection closed before a status line");
        return;
      }
      probe.response.append(buffer, static_cast<size_t>(n));
      int status = ParseStatusLine(probe.response);
      if (status < 0) {
        Finish(probe, false, "not an HTTP response");
        return;
      }
      if (status > 0) {
        Finish(probe, status == 200, "status " + std::to_string(status));
        return;
      }
      if (drained) {
        return;
      }
    }
  }

  void Finish(Probe& probe, bool success, const std::string& reason) {
    probe.done = true;
    probe.tls_transport = nullptr;
    probe.transport.reset();
    probe.tls.reset();
    if (probe.fd >= 0) {
      ::close(probe.fd);
      probe.fd = -1;
    }
    Target& target = *probe.target;
    target.in_flight = false;
    if (target.removed) {
      return;  // the server left the snapshot while we checked it
    }
    balancer::ServerHealth* health = target.health.get();
    bool healthy = health == nullptr || health->healthy.load(std::memory_order_relaxed);
    if (health != nullptr) {
      health->last_check_ms.store(UnixMs(), std::memory_order_relaxed);
      health->last_check_result.store(success ? 1 : -1, std::memory_order_relaxed);
    }
    if (success) {
      owner_->successes_->Inc();
      int64_t rtt_us = std::max<int64_t>(NowUs() - probe.start_us, 1);
      owner_->rtt_->Observe(static_cast<double>(rtt_us) / 1e6);
      if (health != nullptr) {
        int64_t previous = health->smoothed_rtt_us.load(std::memory_order_relaxed);
        int64_t smoothed =
            previous <= 0 ? rtt_us
                          : static_cast<int64_t>(kRttAlpha * static_cast<double>(rtt_us) +
                                                 (1 - kRttAlpha) * static_cast<double>(previous));
        health->smoothed_rtt_us.store(std::max<int64_t>(smoothed, 1), std::memory_order_relaxed);
      }
      target.consecutive_failures = 0;
      ++target.consecutive_successes;
      if (!healthy && target.consecutive_successes >= target.healthy_threshold) {
        SetHealthy(target, true,
                   std::to_string(target.consecutive_successes) + " consecutive successful checks");
      }
    } else {
      owner_->failures_->Inc();
      target.consecutive_successes = 0;
      ++target.consecutive_failures;
      if (healthy && target.consecutive_failures >= target.unhealthy_threshold) {
        SetHealthy(target, false, reason);
      } else {
        Log(LogLevel::kDebug, "health", "check failed",
            {{"group", target.group}, {"server", target.server}, {"reason", reason}});
      }
    }
  }

  void SetHealthy(Target& target, bool up, const std::string& reason) {
    if (target.health != nullptr) {
      target.health->SetHealthy(up, UnixMs());
    }
    std::string address = HostHeader(target.address, target.port);
    if (up) {
      Log(LogLevel::kInfo, "health", "server up",
          {{"group", target.group},
           {"server", target.server},
           {"address", address},
           {"reason", reason}});
    } else {
      Log(LogLevel::kWarn, "health", "server down",
          {{"group", target.group},
           {"server", target.server},
           {"address", address},
           {"reason", reason},
           {"failures", std::to_string(target.consecutive_failures)}});
    }
    if (owner_->options_.on_transition) {
      owner_->options_.on_transition(Transition{target.group, target.server, up, reason});
    }
  }

  // The client settings of passthrough groups' checks: no verification
  // (UpstreamTlsOptions::verify_server), built on first use.
  std::shared_ptr<const tls::UpstreamTls> UnverifiedTls() {
    if (unverified_tls_ == nullptr) {
      tls::UpstreamTlsOptions options;
      options.verify_server = false;
      v1::Group group;
      group.set_key("(passthrough health checks)");
      unverified_tls_ = tls::UpstreamTls::Build(group, options);
    }
    return unverified_tls_;
  }

  HealthChecker* owner_;
  std::shared_ptr<const tls::UpstreamTls> unverified_tls_;
  std::shared_ptr<const routing::RoutingTable> table_;
  std::unordered_map<std::string, std::shared_ptr<Target>> targets_;
  std::vector<Probe> probes_;
  int64_t next_table_read_us_ = 0;
  int64_t last_resource_warning_us_ = INT64_MIN / 2;
};

HealthChecker::HealthChecker(TableSource tables, MetricsRegistry* registry,
                             HealthCheckerOptions options)
    : tables_(std::move(tables)),
      registry_(registry),
      options_(std::move(options)),
      successes_(&registry->GetCounter("kwd_proxy_health_checks_total",
                                       "Active health checks by result.", {{"result", "success"}})),
      failures_(&registry->GetCounter("kwd_proxy_health_checks_total",
                                      "Active health checks by result.", {{"result", "failure"}})),
      rtt_(&registry->GetHistogram("kwd_proxy_health_check_rtt_seconds",
                                   "Round-trip time of successful health checks, connect "
                                   "included.")) {
  options_.max_concurrent_checks = std::max<size_t>(options_.max_concurrent_checks, 1);
  options_.table_poll_ms = std::max<int64_t>(options_.table_poll_ms, 1);
}

HealthChecker::~HealthChecker() {
  Stop();
}

bool HealthChecker::Start(std::string* error) {
  if (thread_.joinable()) {
    *error = "health checker already started";
    return false;
  }
  {
    std::lock_guard lock(wake_mu_);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) {
      *error = std::string("eventfd: ") + std::strerror(errno);
      return false;
    }
  }
  stop_.store(false, std::memory_order_release);
  thread_ = std::thread([this] {
    Loop loop(this);
    loop.Run();
  });
  return true;
}

void HealthChecker::Stop() {
  if (!thread_.joinable()) {
    return;
  }
  stop_.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
  (void)ignored;
  thread_.join();
  std::lock_guard lock(wake_mu_);
  ::close(wake_fd_);
  wake_fd_ = -1;
}

void HealthChecker::TablesChanged() {
  tables_changed_.store(true, std::memory_order_release);
  std::lock_guard lock(wake_mu_);
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
    (void)ignored;
  }
}

}  // namespace kwd::health
