
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "common/admin_http.h"
#include "common/build_info.h"
#include "common/duration.h"
#include "common/file.h"
#include "common/log.h"
#include "common/snapshot_io.h"
#include "dataplane/admin/admin_server.h"
#include "dataplane/cli/proxy_cli.h"
#include "dataplane/health/health_checker.h"
#include "dataplane/net/event_loop.h"
#include "dataplane/proxy/proxy.h"
#include "dataplane/xds/snapshot_client.h"

namespace kwd::cli {

using proxy::Proxy;
using proxy::ProxyOptions;

namespace {

constexpr const char kServeUsage[] =
    "usage: kwd-proxy serve --snapshot FILE | --controller HOST:PORT [flags]\n"
    "\n"
    "Serves HTTP/1.1 on --listen with the routing snapshot from FILE (what\n"
    "`kwd-controller compile` prints; SIGHUP reloads it) or streamed from\n"
    "kwd-controller over gRPC (--controller). An invalid snapshot is rejected (NACK)\n"
    "and the previous one keeps serving, as it does while the controller is away;\n"
    "/readyz answers 200 once a snapshot is applied. SIGTERM/SIGINT stop accepting,\n"
    "let in-flight requests finish (up to --drain-timeout) and exit 0.\n"
    "\n"
    "flags:\n"
    "  --snapshot FILE                  routing snapshot file (JSON)\n"
    "  --controller HOST:PORT           stream snapshots from kwd-controller\n"
    "  --controller-ca FILE             TLS to the controller: the CA that signed its\n"
    "                                   certificate (default: none, plain text)\n"
    "  --controller-cert FILE           this proxy's client certificate, for mutual TLS\n"
    "  --controller-key FILE            ...and its key (PEM files re-read on reconnect)\n"
    "  --controller-server-name NAME    name the controller's certificate must carry\n"
    "                                   (default: the host of --controller)\n"
    "  --snapshot-cache FILE            with --controller: write every applied snapshot here\n"
    "                                   (atomically); at start, serve it when the controller\n"
    "                                   does not answer within 1s, until it does (default: none;\n"
    "                                   mode 0600: it holds UrlMapping.spec.tls private keys)\n"
    "  --listen HOST:PORT               HTTP listener (default 0.0.0.0:8080)\n"
    "  --admin-listen HOST:PORT         /metrics /healthz /readyz /admin\n"
    "                                   (default 127.0.0.1:9901: loopback only)\n"
    // clang-format off
    KWD_ADMIN_ALLOWED_HOSTS_HELP
    // clang-format on
    "  --workers N                      worker threads, 1-256 (default 1)\n"
    "  --node-id ID                     name towards the controller (default: hostname)\n"
    "  --access-log FILE|-|off          access log: a file, - (stdout) or off (default -)\n"
    "  --affinity-key-file FILE         affinity-cookie signing key; every replica must\n"
    "                                   share it (default: $KWD_AFFINITY_KEY, else a public\n"
    "                                   development key). Re-read every 2s: a changed key\n"
    "                                   signs new cookies at once...\n"
    "  --affinity-key-grace D           ...and the previous key is still accepted this long\n"
    "                                   (default 1h)\n"
    "  --header-timeout D               whole request head (default 10s)\n"
    "  --idle-timeout D                 keep-alive between requests (default 1m)\n"
    "  --connect-timeout D              upstream connect (default 5s)\n"
    "  --response-timeout D             upstream response head, then 504 (default 1m)\n"
    "  --max-body-size BYTES            request body limit, then 413 (default 104857600)\n"
    "  --max-header-size BYTES          request head limit, 1024-1048576, then 431\n"
    "                                   (default 65536)\n"
    "  --drain-timeout D                SIGTERM drain (default 10s)\n"
    "  --io-uring auto|off              auto: each worker batches its socket sends and\n"
    "                                   receives through io_uring (one kernel entry per\n"
    "                                   event batch); where\n"
    "                                   the kernel or a seccomp profile refuses io_uring,\n"
    "                                   one info line says so and plain send() is used.\n"
    "                                   off: plain send()/recv() (default auto)\n"
    "  --log-level debug|info|warn|error  (default info)\n"
    "  --log-format text|json           logfmt lines or one JSON object per line, for the\n"
    "                                   logs and the access log (default text)\n"
    "  --admin-token-file FILE          bearer token that enables POST\n"
    "                                   /admin/api/servers/drain and /undrain (default: none,\n"
    "                                   the admin port is read-only)\n"
    "\n"
    "HTTPS, client certificates, re-encryption, passthrough:\n"
    "  --tls-listen HOST:PORT           HTTPS listener (default: none); needs --tls-cert-dir\n"
    "  --tls-cert-dir DIR               every pair NAME.crt + NAME.key or <secret>/tls.crt +\n"
    "                                   tls.key; SNI picks by name (exact, then wildcard),\n"
    "                                   else the first pair; changed files load within\n"
    "                                   seconds, a broken pair is refused and the old serves\n"
    "                                   (UrlMapping.spec.tls certificates from the snapshot\n"
    "                                   join these and win for the hosts they list)\n"    "  --tls-client-ca FILE             CA for client certificates (default: none)\n"
    "  --tls-verify-client none|optional|required  (default none; optional with a CA)\n"
    "                                   a verified certificate is forwarded as\n"
    "                                   SSL_CLIENT_CERT (+ SSL_CLIENT_CERT_CHAIN_<n>)\n"
    "  --tls-handshake-timeout D        TLS handshake limit (default 10s)\n"
    "  --upstream-cert-dir DIR          client certificates for re-encryption:\n"
    "                                   DIR/<clientCertSecret>/tls.crt + tls.key (default:\n"
    "                                   none)\n"
    "  --passthrough-listen HOST:PORT   end-to-end TLS (default: none): the ClientHello's\n"
    "                                   server name picks the UrlMapping whose\n"
    "                                   passthroughGroup takes the connection, undecrypted\n"
    "  --proxy-protocol LISTENERS       http,tls,passthrough: these listeners require a\n"
    "                                   PROXY v1/v2 header (default: none)\n"
    "  --trusted-proxies CIDR,...       peers whose X-Forwarded-For/-Proto and X-Request-Id\n"
    "                                   are honoured, and whose Forwarded, X-Real-IP,\n"
    "                                   X-Forwarded-Port, ClientProtocol and x-sap-webdisp-ap\n"
    "                                   pass on (default: none; from others these are\n"
    "                                   dropped)\n"
    "  --public-ports http=P,https=P    the ports clients reach --listen and --tls-listen\n"
    "                                   on (a Service's), for SAP's x-sap-webdisp-ap to\n"
    "                                   ABAP servers (default: the bound listen ports)\n"
    "\n"
    "HTTP/2 (ALPN h2 on --tls-listen, preferred over http/1.1; upstreams stay HTTP/1.1):\n"
    "  --h2c                            serve cleartext HTTP/2 with prior knowledge on\n"
    "                                   --listen (a connection that starts with the HTTP/2\n"
    "                                   preface); others stay HTTP/1.1 (default: off)\n"
    "  --h2-max-concurrent-streams N    streams per connection, 1-1000; more are refused\n"
    "                                   (default 100)\n"
    "  --h2-ping-timeout D              PING a connection with open streams silent this\n"
    "                                   long; no answer in as long: closed (default 20s)\n"
    "                                   (--max-header-size bounds a stream's header list:\n"
    "                                   431 beyond, GOAWAY once a header block is 64 KiB\n"
    "                                   past it on the wire or decoded; --idle-timeout a\n"
    "                                   connection with no open stream)\n"
    "\n"
    "Durations need a unit: 500ms, 10s, 2m, 1h (a bare number is refused).\n";

constexpr int64_t kAffinityKeyPollMs = 2000;
constexpr int64_t kHealthTablePollMs = 5000;

void ReportIoUringUnavailable(int error) {
  Log(LogLevel::kInfo, "proxy",
      "io_uring is not available (seccomp profile, kernel.io_uring_disabled or an old kernel); "
      "sending with plain syscalls",
      {{"error", std::strerror(error)}});
}

// --affinity-key-file is re-read on this schedule: Kubernetes updates a
// mounted Secret in place (an atomic symlink swap), so a rotated key reaches
// running proxies without a restart.
struct AffinityKeyWatch {
  std::string file;
  std::chrono::milliseconds grace{3'600'000};
  std::string current;  // the key in use
  std::string last_error;

  void Check(proxy::Proxy& proxy) {
    std::string key;
    std::string error;
    bool development = false;
    if (!LoadAffinityKey(file, &key, &development, &error)) {
      if (error != last_error) {
        Log(LogLevel::kWarn, "serve", "affinity key file unreadable; keeping the current key",
            {{"error", error}});
        last_error = error;
      }
      return;
    }
    last_error.clear();
    if (key != current) {
      proxy.RotateAffinityKey(key, grace);
      current = std::move(key);
      Log(LogLevel::kInfo, "serve", "affinity key changed: signing with the new key",
          {{"previous_key_accepted_for", FormatDurationMs(grace.count())}});
    }
  }
};

// "http,tls,passthrough" (any subset, at least one).
bool ParseProxyProtocolListeners(std::string_view list, ProxyOptions* options, std::string* error) {
  bool any = false;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (item == "http") {
      options->proxy_protocol_http = true;
    } else if (item == "tls") {
      options->proxy_protocol_tls = true;
    } else if (item == "passthrough") {
      options->proxy_protocol_passthrough = true;
    } else {
      *error = "\"" + std::string(item) + "\" is not a listener (http, tls, passthrough)";
      return false;
    }
    any = true;
  }
  if (!any) {
    *error = "name at least one listener (http, tls, passthrough)";
  }
  return any;
}

bool ParseUnsigned(std::string_view text, uint64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// --public-ports http=80,https=443 (either alone).
bool ParsePublicPorts(std::string_view list, ProxyOptions* options, std::string* error) {
  options->public_ports_given = true;
  options->public_http_port = 0;
  options->public_https_port = 0;
  bool any = false;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    size_t eq = entry.find('=');
    std::string_view name = entry.substr(0, eq);
    uint64_t port = 0;
    uint16_t* slot = name == "http"    ? &options->public_http_port
                     : name == "https" ? &options->public_https_port
                                       : nullptr;
    if (slot == nullptr || eq == std::string_view::npos ||
        !ParseUnsigned(entry.substr(eq + 1), &port) || port < 1 || port > 65535) {
      *error = "--public-ports takes http=PORT,https=PORT (either alone, ports 1-65535)";
      return false;
    }
    if (*slot != 0) {
      *error = "--public-ports names " + std::string(name) + " twice";
      return false;
    }
    *slot = static_cast<uint16_t>(port);
    any = true;
  }
  if (!any) {
    *error = "--public-ports takes http=PORT,https=PORT (either alone, ports 1-65535)";
  }
  return any;
}

// Test seam (black-box tests of the NACK path): reject every snapshot that
// contains the group named by $KWD_TEST_REJECT_GROUP ("namespace/name"), as
// if it broke an invariant. The controller never publishes a snapshot that
// fails CheckSnapshot, so a real process cannot be made to NACK otherwise.
bool RejectedByTestSeam(const v1::Snapshot& snapshot, std::string* error) {
  const char* group = std::getenv("KWD_TEST_REJECT_GROUP");
  if (group == nullptr || *group == 0) {
    return false;
  }
  for (const auto& candidate : snapshot.groups()) {
    if (candidate.key() == group) {
      *error = std::string("group ") + group + " rejected by KWD_TEST_REJECT_GROUP";
      return true;
    }
  }
  return false;
}

bool LoadAndApply(proxy::Proxy& proxy, const std::string& path, admin::SnapshotSourceStatus& source,
                  std::string* error) {
  v1::Snapshot snapshot;
  if (!LoadSnapshotFile(path, &snapshot, error)) {
    source.Rejected("", *error);
    return false;
  }
  if (!proxy.ApplySnapshot(snapshot, error)) {
    *error = path + ": " + *error;
    source.Rejected(snapshot.version(), *error);
    return false;
  }
  source.Applied(snapshot.version());
  source.Serving(snapshot.version(), "file");
  return true;
}

// Every client and upstream connection holds a descriptor, and distributions
// start processes with a soft limit of 1024: raise it to the hard limit (the
// most an unprivileged process may), and say what it is.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return;
  }
  rlim_t target = limit.rlim_max;
  if (target == RLIM_INFINITY) {
    // The kernel refuses an unlimited RLIMIT_NOFILE; its ceiling is nr_open.
    unsigned long nr_open = 1024 * 1024;
    std::ifstream("/proc/sys/fs/nr_open") >> nr_open;
    target = static_cast<rlim_t>(nr_open);
  }
  std::string error;
  if (limit.rlim_cur < target) {
    rlimit raised = limit;
    raised.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    } else {
      error = std::strerror(errno);
    }
  }
  if (error.empty()) {
    Log(LogLevel::kInfo, "serve", "file descriptor limit",
        {{"open_files", std::to_string(limit.rlim_cur)}});
  } else {
    Log(LogLevel::kWarn, "serve", "could not raise the file descriptor limit",
        {{"open_files", std::to_string(limit.rlim_cur)}, {"error", error}});
  }
}

}  // namespace

int ServeMain(int argc, char** argv, std::ostream& out, std::ostream& err) {
  net::EventLoop::SetIoUringMode(net::IoUringMode::kAuto, &ReportIoUringUnavailable);
  ProxyOptions options;
  std::string error;
  net::ParseEndpoint("0.0.0.0:8080", &options.listen, &error);
  net::ParseEndpoint("127.0.0.1:9901", &options.admin_listen, &error);
  std::string snapshot_path;
  std::string controller;
  std::string affinity_key_file;
  std::string admin_token_file;
  std::vector<std::string> admin_allowed_hosts;
  std::string controller_ca;
  std::string snapshot_cache;
  std::string controller_cert;
  std::string controller_key;
  std::string controller_server_name;
  int64_t drain_ms = 10'000;
  bool verify_client_given = false;
  AffinityKeyWatch key_watch;

  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      out << kServeUsage;
      return 0;
    }
    if (arg == "--version") {
      out << VersionLine("kwd-proxy") << "\n";
      return 0;
    }
    if (arg == "--h2c") {
      options.h2c = true;
      continue;
    }
    std::string_view value;
    auto eq = arg.find('=');
    std::string_view name = arg.substr(0, eq);
    if (eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      err << "kwd-proxy serve: " << name << " needs a value\n\n" << kServeUsage;
      return 2;
    }
    bool ok = true;
    uint64_t number = 0;
    error.clear();
    if (name == "--snapshot") {
      snapshot_path = value;
    } else if (name == "--controller") {
      controller = value;
    } else if (name == "--snapshot-cache") {
      snapshot_cache = value;
    } else if (name == "--controller-ca") {
      controller_ca = value;
    } else if (name == "--controller-cert") {
      controller_cert = value;
    } else if (name == "--controller-key") {
      controller_key = value;
    } else if (name == "--controller-server-name") {
      controller_server_name = value;
    } else if (name == "--listen") {
      ok = net::ParseEndpoint(value, &options.listen, &error);
    } else if (name == "--tls-listen") {
      ok = net::ParseEndpoint(value, &options.tls_listen, &error);
    } else if (name == "--tls-cert-dir") {
      options.tls.cert_dir = value;
    } else if (name == "--upstream-cert-dir") {
      options.upstream_tls.cert_dir = std::string(value);
      std::error_code ec;
      ok = std::filesystem::is_directory(std::string(value), ec);
      error = "not a directory";
    } else if (name == "--tls-client-ca") {
      options.tls.client_ca_file = value;
    } else if (name == "--tls-verify-client") {
      ok = tls::ParseVerifyClient(value, &options.tls.verify_client);
      error = "--tls-verify-client takes none, optional or required";
      verify_client_given = true;
    } else if (name == "--tls-handshake-timeout") {
      ok = ParseDurationMs(value, &options.handshake_timeout_ms, &error) &&
           options.handshake_timeout_ms > 0;
      if (ok || error.empty()) {
        error = "--tls-handshake-timeout must be more than 0";
      }
    } else if (name == "--admin-listen") {
      ok = net::ParseEndpoint(value, &options.admin_listen, &error);
    } else if (name == "--admin-allowed-hosts") {
      ok = ParseAdminAllowedHosts(value, &admin_allowed_hosts, &error);
    } else if (name == "--workers") {
      ok = ParseUnsigned(value, &number) && number >= 1 && number <= 256;
      options.workers = static_cast<int>(number);
      error = "--workers takes a number from 1 to 256";
    } else if (name == "--node-id") {
      options.node_id = value;
    } else if (name == "--access-log") {
      options.access_log = value;
    } else if (name == "--affinity-key-file") {
      affinity_key_file = value;
    } else if (name == "--admin-token-file") {
      admin_token_file = value;
    } else if (name == "--affinity-key-grace") {
      int64_t grace_ms = 0;
      ok = ParseDurationMs(value, &grace_ms, &error);
      key_watch.grace = std::chrono::milliseconds(grace_ms);
    } else if (name == "--header-timeout") {
      ok = ParseDurationMs(value, &options.header_timeout_ms, &error);
    } else if (name == "--idle-timeout") {
      ok = ParseDurationMs(value, &options.idle_timeout_ms, &error);
    } else if (name == "--connect-timeout") {
      ok = ParseDurationMs(value, &options.connect_timeout_ms, &error);
    } else if (name == "--response-timeout") {
      ok = ParseDurationMs(value, &options.response_timeout_ms, &error);
    } else if (name == "--drain-timeout") {
      ok = ParseDurationMs(value, &drain_ms, &error);
    } else if (name == "--max-body-size") {
      ok = ParseUnsigned(value, &options.max_body_bytes);
    } else if (name == "--max-header-size") {
      ok = ParseUnsigned(value, &number) && number >= 1024 && number <= 1024 * 1024;
      options.max_header_bytes = number;
      error = "--max-header-size takes 1024 to 1048576 bytes";
    } else if (name == "--h2-max-concurrent-streams") {
      ok = ParseUnsigned(value, &number) && number >= 1 && number <= 1000;
      options.h2_max_concurrent_streams = static_cast<uint32_t>(number);
      error = "--h2-max-concurrent-streams takes 1 to 1000";
    } else if (name == "--h2-ping-timeout") {
      ok = ParseDurationMs(value, &options.h2_ping_timeout_ms, &error) &&
           options.h2_ping_timeout_ms > 0;
      if (ok || error.empty()) {
        error = "--h2-ping-timeout must be more than 0";
      }
    } else if (name == "--passthrough-listen") {
      ok = net::ParseEndpoint(value, &options.passthrough_listen, &error);
      options.passthrough = ok;
    } else if (name == "--proxy-protocol") {
      ok = ParseProxyProtocolListeners(value, &options, &error);
    } else if (name == "--trusted-proxies") {
      ok = options.trusted_proxies.Parse(value, &error);
    } else if (name == "--public-ports") {
      ok = ParsePublicPorts(value, &options, &error);
    } else if (name == "--io-uring") {
      ok = value == "auto" || value == "off";
      net::EventLoop::SetIoUringMode(value == "off" ? net::IoUringMode::kOff : net::IoUringMode::kAuto,
                                     &ReportIoUringUnavailable);
      error = "--io-uring takes auto or off";
    } else if (name == "--log-level") {
      LogLevel level;
      ok = ParseLogLevel(value, &level);
      if (ok) {
        SetLogLevel(level);
      }
      error = "--log-level takes debug, info, warn or error";
    } else if (name == "--log-format") {
      LogFormat format;
      ok = ParseLogFormat(value, &format);
      if (ok) {
        SetLogFormat(format);
      }
      error = "--log-format takes text or json";
    } else {
      err << "kwd-proxy serve: unknown flag \"" << name << "\"\n\n" << kServeUsage;
      return 2;
    }
    if (!ok) {
      err << "kwd-proxy serve: invalid value \"" << value << "\" for " << name;
      if (!error.empty()) {
        err << ": " << error;
      }
      err << "\n";
      return 2;
    }
  }
  if (options.proxy_protocol_passthrough && !options.passthrough) {
    err << "kwd-proxy serve: --proxy-protocol passthrough needs --passthrough-listen\n";
    return 2;
  }
  if (snapshot_path.empty() == controller.empty()) {
    err << "kwd-proxy serve: give exactly one of --snapshot FILE or --controller HOST:PORT\n\n"
        << kServeUsage;
    return 2;
  }
  if (!snapshot_cache.empty() && controller.empty()) {
    err << "kwd-proxy serve: --snapshot-cache goes with --controller (a --snapshot file is its "
           "own cache)\n";
    return 2;
  }
  if (!snapshot_cache.empty()) {
    std::string dir = std::filesystem::path(snapshot_cache).parent_path().string();
    if (dir.empty()) {
      dir = ".";
    }
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
      err << "kwd-proxy serve: --snapshot-cache " << snapshot_cache << ": cannot write to "
          << dir << ": " << std::strerror(errno) << "\n";
      return 2;
    }
  }
  bool tls_listen = options.tls_listen.len != 0;
  if (options.proxy_protocol_tls && !tls_listen) {
    err << "kwd-proxy serve: --proxy-protocol tls needs --tls-listen\n";
    return 2;
  }
  if (tls_listen != !options.tls.cert_dir.empty()) {
    err << "kwd-proxy serve: --tls-listen and --tls-cert-dir go together\n";
    return 2;
  }
  if (!tls_listen && (!options.tls.client_ca_file.empty() || verify_client_given)) {
    err << "kwd-proxy serve: --tls-client-ca and --tls-verify-client need --tls-listen\n";
    return 2;
  }
  if (options.tls.verify_client != tls::VerifyClient::kNone && options.tls.client_ca_file.empty()) {
    err << "kwd-proxy serve: --tls-verify-client optional|required needs --tls-client-ca FILE\n";
    return 2;
  }
  if (!options.tls.client_ca_file.empty() && !verify_client_given) {
    // A client CA without a mode: ask for certificates, require none.
    options.tls.verify_client = tls::VerifyClient::kOptional;
  }
  std::optional<xds::ClientTls> controller_tls;
  bool tls_flags = !controller_ca.empty() || !controller_cert.empty() || !controller_key.empty() ||
                   !controller_server_name.empty();
  if (controller.empty() && tls_flags) {
    err << "kwd-proxy serve: --controller-ca/--controller-cert/--controller-key/"
           "--controller-server-name need --controller\n";
    return 2;
  }
  if (tls_flags) {
    controller_tls =
        xds::ClientTls{controller_ca, controller_cert, controller_key, controller_server_name};
    if (controller_cert.empty() != controller_key.empty()) {
      err << "kwd-proxy serve: --controller-cert and --controller-key go together\n";
      return 2;
    }
    if (!xds::CheckClientTls(*controller_tls, &error)) {
      err << "kwd-proxy serve: " << error << "\n";
      return 1;
    }
  }
  bool development_key = false;
  if (!LoadAffinityKey(affinity_key_file, &options.affinity_key, &development_key, &error)) {
    err << "kwd-proxy serve: " << error << "\n";
    return 1;
  }
  key_watch.file = affinity_key_file;
  key_watch.current = options.affinity_key;
  if (development_key) {
    Log(LogLevel::kWarn, "serve",
        "no affinity-cookie key given (--affinity-key-file or KWD_AFFINITY_KEY): using the "
        "public development key; affinity cookies can be forged");
  }
  std::string admin_token;
  if (!admin_token_file.empty() && !LoadAdminToken(admin_token_file, &admin_token, &error)) {
    err << "kwd-proxy serve: " << error << "\n";
    return 1;
  }
  if (options.node_id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    options.node_id = host;
  }

  // Signals go to this thread only: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  RaiseDescriptorLimit();

  Proxy proxy(options);
  if (!proxy.Start(&error)) {
    err << "kwd-proxy serve: " << error << "\n";
    return 1;
  }
  std::unique_ptr<xds::SnapshotClient> client;
  auto source = std::make_shared<admin::SnapshotSourceStatus>();
  if (!snapshot_path.empty()) {
    source->SetSource("file", snapshot_path);
    if (!LoadAndApply(proxy, snapshot_path, *source, &error)) {
      err << "kwd-proxy serve: " << error << "\n";
      proxy.Shutdown(0);
      return 1;
    }
  } else {
    xds::SnapshotClientOptions client_options;
    client_options.target = controller;
    client_options.node_id = options.node_id;
    client_options.tls = controller_tls;
    client_options.cache_path = snapshot_cache;
    client_options.on_serving = [source](const std::string& version, bool from_cache) {
      source->Serving(version, from_cache ? "cache" : "controller");
    };
    client = std::make_unique<xds::SnapshotClient>(
        client_options,
        [&proxy, source](const v1::Snapshot& snapshot, std::string* apply_error) {
          if (RejectedByTestSeam(snapshot, apply_error) ||
              !proxy.ApplySnapshot(snapshot, apply_error)) {
            source->Rejected(snapshot.version(), *apply_error);
            return false;
          }
          source->Applied(snapshot.version());
          return true;
        },
        &proxy.metrics().registry());
    source->SetSource("controller", controller);
    source->SetConnectedProbe([client = client.get()] { return client->connected(); });
    // Workers answer 503 and /readyz 503 until the first snapshot arrives.
    client->Start();
  }
  // A new snapshot wakes the checker (the table poll is only a fallback, so an
  // idle proxy's checker thread does not wake 5 times a second to look).
  health::HealthCheckerOptions health_options;
  health_options.table_poll_ms = kHealthTablePollMs;
  health::HealthChecker checker([&proxy] { return proxy.table(); }, &proxy.metrics().registry(),
                                health_options);
  proxy.SetOnTableApplied([&checker] { checker.TablesChanged(); });
  // Declared after the checker, destroyed before it: no snapshot applied
  // after this (the controller client's thread) reaches a destroyed checker.
  struct Unhook {
    Proxy* proxy;
    ~Unhook() { proxy->SetOnTableApplied(nullptr); }
  } unhook{&proxy};
  if (!checker.Start(&error)) {
    err << "kwd-proxy serve: cannot start health checks: " << error << "\n";
    proxy.Shutdown(0);
    return 1;
  }
  admin::AdminOptions admin_options;
  admin_options.listen = options.admin_listen;
  admin_options.limits.allowed_hosts = admin_allowed_hosts;
  admin_options.token = admin_token;
  admin_options.source = source;
  admin_options.node_id = options.node_id;
  admin::AdminServer admin(&proxy, admin_options);
  if (!admin.Start(&error)) {
    err << "kwd-proxy serve: cannot serve the admin port: " << error << "\n";
    checker.Stop();
    proxy.Shutdown(0);
    return 1;
  }
  Log(LogLevel::kInfo, "serve", "listening",
      {{"address", proxy.bound().ToString()},
       {"workers", std::to_string(options.workers)},
       {"admin", options.admin_listen.ToString()},
       {"node", options.node_id},
       {"snapshot", snapshot_path.empty() ? "controller " + controller : snapshot_path}});
  if (proxy.tls_bound().len != 0) {
    Log(LogLevel::kInfo, "serve", "listening for HTTPS",
        {{"address", proxy.tls_bound().ToString()}, {"cert_dir", options.tls.cert_dir}});
  }
  // Tests and scripts read the bound address (useful with port 0).
  out << "listening " << proxy.bound().ToString() << std::endl;
  if (proxy.tls_bound().len != 0) {
    out << "listening-tls " << proxy.tls_bound().ToString() << std::endl;
  }
  if (options.passthrough) {
    Log(LogLevel::kInfo, "serve", "listening for TLS passthrough",
        {{"address", proxy.passthrough_bound().ToString()}});
    out << "passthrough " << proxy.passthrough_bound().ToString() << std::endl;
  }

  const timespec key_poll{kAffinityKeyPollMs / 1000, (kAffinityKeyPollMs % 1000) * 1'000'000};
  for (;;) {
    // Without a key file there is nothing to poll: wait for a signal alone.
    int sig = key_watch.file.empty() ? sigwaitinfo(&signals, nullptr)
                                     : sigtimedwait(&signals, nullptr, &key_poll);
    if (sig < 0) {
      if (errno == EAGAIN && !key_watch.file.empty()) {
        key_watch.Check(proxy);
      }
      continue;
    }
    if (sig == SIGHUP && client) {
      Log(LogLevel::kInfo, "serve", "SIGHUP ignored: snapshots come from the controller");
      continue;
    }
    if (sig == SIGHUP) {
      if (LoadAndApply(proxy, snapshot_path, *source, &error)) {
        Log(LogLevel::kInfo, "serve", "snapshot reloaded", {{"version", proxy.version()}});
      } else {
        Log(LogLevel::kError, "serve", "snapshot rejected; the previous one keeps serving",
            {{"error", error}});
      }
      continue;
    }
    Log(LogLevel::kInfo, "serve", "shutting down: draining in-flight requests",
        {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
    if (client) {
      client->Stop();
    }
    proxy.Shutdown(drain_ms);
    checker.Stop();
    admin.Stop();
    Log(LogLevel::kInfo, "serve", "stopped");
    return 0;
  }
}

}  // namespace kwd::cli
