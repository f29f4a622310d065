
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "common/file.h"
#include "common/log.h"
#include "common/snapshot_io.h"
#include "dataplane/admin/admin_server.h"
#include "dataplane/cli/proxy_cli.h"
#include "dataplane/health/health_checker.h"
#include "dataplane/proxy/proxy.h"
#include "dataplane/xds/snapshot_client.h"

namespace kwd::cli {

using proxy::Proxy;
using proxy::ProxyOptions;

namespace {

constexpr const char kServeUsage[] =
    "usage: kwd-proxy serve --snapshot FILE | --controller HOST:PORT\n"
    "                       [--listen 0.0.0.0:8080] [--admin-listen 0.0.0.0:9901]\n"
    "                       [--workers N] [--node-id ID] [--access-log FILE|-|off]\n"
    "                       [--affinity-key-file FILE] [--header-timeout 10s]\n"
    "                       [--idle-timeout 60s] [--connect-timeout 5s]\n"
    "                       [--response-timeout 60s] [--max-body-size 104857600]\n"
    "                       [--max-header-size 65536] [--drain-timeout 10s]\n"
    "                       [--log-level debug|info|warn|error] [--log-format text|json]\n"
    "                       [--admin-token-file FILE]\n"
    "                       [--controller-ca FILE] [--controller-cert FILE]\n"
    "                       [--controller-key FILE] [--controller-server-name NAME]\n"
    "                       [--tls-listen 0.0.0.0:8443 --tls-cert-dir DIR]\n"
    "                       [--tls-client-ca FILE]\n"
    "                       [--tls-verify-client none|optional|required]\n"
    "                       [--tls-handshake-timeout 10s]\n"
    "                       [--passthrough-listen 0.0.0.0:9443]\n"
    "                       [--proxy-protocol http,tls,passthrough]\n"
    "                       [--trusted-proxies CIDR,...]\n"
    "                       [--upstream-cert-dir DIR]\n"
    "\n"
    "Serves HTTP/1.1 on --listen with the routing snapshot from FILE (what\n"
    "`kwd-controller compile` prints). SIGHUP reloads FILE: an invalid snapshot is\n"
    "rejected and the previous one keeps serving.\n"
    "With --controller the snapshots stream from kwd-controller over gRPC; an\n"
    "invalid one is rejected (NACK) and the previous one keeps serving, as it\n"
    "does while the controller is away; /readyz answers 200 once a snapshot is\n"
    "applied. TLS to the controller: --controller-ca (the CA that signed the\n"
    "controller's certificate), --controller-cert/--controller-key (this proxy's\n"
    "client certificate, for mutual TLS), --controller-server-name (the name the\n"
    "controller's certificate must carry; default: the host of --controller). The\n"
    "PEM files are read again on every reconnect. SIGTERM stops accepting, lets\n"
    "in-flight requests finish (up to --drain-timeout) and exits.\n"
    "HTTPS: --tls-listen terminates TLS 1.2/1.3 with every certificate pair in\n"
    "--tls-cert-dir (NAME.crt + NAME.key, or Secret mounts <secret>/tls.crt +\n"
    "tls.key); SNI picks the pair whose certificate names the host (exact, then\n"
    "wildcard), else the first pair by name. Changed files are loaded within\n"
    "seconds; a pair that does not load is refused (logged, counted) and the one\n"
    "it would replace keeps serving. --tls-verify-client optional|required asks\n"
    "for a client certificate signed by --tls-client-ca; a verified one is\n"
    "forwarded as SSL_CLIENT_CERT (+ SSL_CLIENT_CERT_CHAIN_<n>), with\n"
    "SSL_CIPHER_SUITE and SSL_CIPHER_USEKEYSIZE; clients' own such headers are\n"
    "always dropped. --tls-handshake-timeout bounds a TLS handshake.\n"
    "Re-encryption (LogonGroup upstreamTLS mode reencrypt): the group's servers\n"
    "are reached over TLS 1.2/1.3, verified against its caBundle (else the system\n"
    "store) and its serverName (else the server's address); a failure answers 502\n"
    "and is never retried in clear. A group's clientCertSecret is read from\n"
    "--upstream-cert-dir DIR/<secret>/tls.crt + tls.key (reloaded on change).\n"
    "The affinity-cookie key comes from --affinity-key-file, else $KWD_AFFINITY_KEY;\n"
    "every replica must use the same key. Durations take ms, s or m suffixes.\n"
    "--log-format json writes the logs on stderr and the access log as one JSON\n"
    "object per line (default text: logfmt logs, Common Log Format access log).\n"
    "The admin port (/admin, /admin/api/...) is read-only unless --admin-token-file\n"
    "names a file holding a token: then POST /admin/api/servers/drain and /undrain\n"
    "take \"Authorization: Bearer <token>\".\n"
    "--passthrough-listen: TLS passthrough (end-to-end TLS): the ClientHello's server\n"
    "name picks the UrlMapping whose passthroughGroup takes the connection; the\n"
    "bytes go to a server of that group undecrypted. A ClientHello must arrive\n"
    "within --header-timeout; unknown or missing server names without a default\n"
    "group are closed.\n"
    "--proxy-protocol: the listed listeners (http, tls, passthrough) require a PROXY\n"
    "protocol v1 or v2 header (within --header-timeout) and take the client address\n"
    "from it; connections without one are closed.\n"
    "--trusted-proxies: from peers in these ranges X-Forwarded-For and\n"
    "X-Forwarded-Proto are honoured (client address: the right-most untrusted one;\n"
    "X-Forwarded-Proto: https counts as https); from others they are replaced.\n";

bool ParseDurationMs(std::string_view text, int64_t* out) {
  int64_t multiplier = 1000;
  if (text.ends_with("ms")) {
    multiplier = 1;
    text.remove_suffix(2);
  } else if (text.ends_with("s")) {
    text.remove_suffix(1);
  } else if (text.ends_with("m")) {
    multiplier = 60'000;
    text.remove_suffix(1);
  }
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value < 0) {
    return false;
  }
  *out = value * multiplier;
  return true;
}

// "http,tls,passthrough" (any subset, at least one).
bool ParseProxyProtocolListeners(std::string_view list, ProxyOptions* options,
                                 std::string* error) {
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
  ProxyOptions options;
  std::string error;
  net::ParseEndpoint("0.0.0.0:8080", &options.listen, &error);
  net::ParseEndpoint("0.0.0.0:9901", &options.admin_listen, &error);
  std::string snapshot_path;
  std::string controller;
  std::string affinity_key_file;
  std::string admin_token_file;
  std::string controller_ca;
  std::string controller_cert;
  std::string controller_key;
  std::string controller_server_name;
  int64_t drain_ms = 10'000;
  bool verify_client_given = false;

  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      out << kServeUsage;
      return 0;
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
    if (name == "--snapshot") {
      snapshot_path = value;
    } else if (name == "--controller") {
      controller = value;
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
      ok = ParseDurationMs(value, &options.handshake_timeout_ms) &&
           options.handshake_timeout_ms > 0;
    } else if (name == "--admin-listen") {
      ok = net::ParseEndpoint(value, &options.admin_listen, &error);
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
    } else if (name == "--header-timeout") {
      ok = ParseDurationMs(value, &options.header_timeout_ms);
    } else if (name == "--idle-timeout") {
      ok = ParseDurationMs(value, &options.idle_timeout_ms);
    } else if (name == "--connect-timeout") {
      ok = ParseDurationMs(value, &options.connect_timeout_ms);
    } else if (name == "--response-timeout") {
      ok = ParseDurationMs(value, &options.response_timeout_ms);
    } else if (name == "--drain-timeout") {
      ok = ParseDurationMs(value, &drain_ms);
    } else if (name == "--max-body-size") {
      ok = ParseUnsigned(value, &options.max_body_bytes);
    } else if (name == "--max-header-size") {
      ok = ParseUnsigned(value, &number) && number >= 1024 && number <= 1024 * 1024;
      options.max_header_bytes = number;
      error = "--max-header-size takes 1024 to 1048576 bytes";
    } else if (name == "--passthrough-listen") {
      ok = net::ParseEndpoint(value, &options.passthrough_listen, &error);
      options.passthrough = ok;
    } else if (name == "--proxy-protocol") {
      ok = ParseProxyProtocolListeners(value, &options, &error);
    } else if (name == "--trusted-proxies") {
      ok = options.trusted_proxies.Parse(value, &error);
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
      if (name == "--listen" || name == "--admin-listen" || name == "--workers" ||
          name == "--max-header-size" || name == "--log-level" || name == "--log-format" ||
          name == "--tls-listen" || name == "--tls-verify-client" ||
          name == "--passthrough-listen" || name == "--proxy-protocol" ||
          name == "--trusted-proxies" || name == "--upstream-cert-dir") {
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
  if (options.tls.verify_client != tls::VerifyClient::kNone &&
      options.tls.client_ca_file.empty()) {
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
  health::HealthChecker checker([&proxy] { return proxy.table(); }, &proxy.metrics().registry());
  if (!checker.Start(&error)) {
    err << "kwd-proxy serve: cannot start health checks: " << error << "\n";
    proxy.Shutdown(0);
    return 1;
  }
  admin::AdminOptions admin_options;
  admin_options.listen = options.admin_listen;
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

  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) {
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
