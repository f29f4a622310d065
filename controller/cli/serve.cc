#include "controller/cli/serve.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "common/admin_http.h"
#include "common/duration.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/snapshot_io.h"
#include "controller/admin/admin_server.h"
#include "controller/admin/state.h"
#include "controller/cli/cli.h"
#include "controller/grpc/replica_reports.h"
#include "controller/grpc/snapshot_server.h"
#include "controller/kube/event_recorder.h"
#include "controller/kube/kube_client.h"
#include "controller/kube/kube_config.h"
#include "controller/kube/leader_elector.h"
#include "controller/pipeline/dir_watcher.h"
#include "controller/pipeline/kube_source.h"
#include "controller/pipeline/pipeline.h"
#include "controller/pipeline/status.h"
#include "controller/sapsystem/poller.h"

namespace kwd::cli {
namespace {

using std::chrono::milliseconds;

// A controller class: a DNS label (it ends up in the Lease's name).
bool IsClassName(std::string_view name) {
  if (name.empty() || name.size() > 63 || name.front() == '-' || name.back() == '-') {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

constexpr std::string_view kServeUsage =
    "usage: kwd-controller serve --source=dir:DIR | --source=kube [flags]\n"
    "\n"
    "Follows a directory or a cluster, compiles a routing snapshot on every change\n"
    "and serves it; writes status conditions on LogonGroups and UrlMappings (kube).\n"
    "\n"
    "flags:\n"
    "  --source=dir:DIR | kube          where the objects come from (required)\n"
    "  --kubeconfig FILE                kubeconfig (default: $KUBECONFIG, else in-cluster)\n"
    "  --namespace NS                   watch only NS (repeatable; default: all namespaces)\n"
    "  --grpc-listen HOST:PORT          snapshot gRPC server for kwd-proxy --controller\n"
    "                                   (default 127.0.0.1:18000: loopback only;\n"
    "                                   a pod gives its address or 0.0.0.0:18000)\n"
    "  --grpc-tls-cert FILE             serve gRPC over TLS with this certificate chain (PEM)...\n"
    "                                   (default: none, plain text)\n"
    "  --grpc-tls-key FILE              ...and its key (PEM); both re-read when they change\n"
    "  --grpc-client-ca FILE            mutual TLS: refuse proxies without a client certificate\n"
    "                                   signed by a CA in FILE (PEM; re-read when it changes)\n"
    "  --admin-listen HOST:PORT         /metrics /healthz /readyz /debug/snapshot /debug/objects\n"
    "                                   /admin /admin/api/state\n"
    "                                   (default 127.0.0.1:9902: loopback only)\n"
    // clang-format off
    KWD_ADMIN_ALLOWED_HOSTS_HELP
    // clang-format on
    "  --class NAME                     program only the LogonGroups, UrlMappings and\n"
    "                                   SapSystems whose spec.className is NAME, so that two\n"
    "                                   installs share a cluster (default: those without a\n"
    "                                   className); the Lease becomes kwd-controller-NAME\n"
    "  --leader-elect                   only the holder of Lease kwd-controller writes status\n"
    "                                   (default false)\n"
    "  --leader-election-namespace NS   the Lease's namespace (default: the service account's,\n"
    "                                   else \"default\")\n"
    "  --leader-election-identity ID    (default: hostname + random suffix)\n"
    "  --lease-duration D               (default 15s)\n"
    "  --renew-deadline D               (default 10s)\n"
    "  --retry-period D                 (default 2s)\n"
    "  --hold-off D                     wait this long after a change for more (default 10ms)\n"
    "  --max-delay D                    compile at most this long after the first change\n"
    "                                   of a burst (default 100ms)\n"
    "  --poll-interval D                dir source: how often files are checked (default 1s)\n"
    "  --sapsystem-timeout D            SapSystem polls: timeout of each request to a message\n"
    "                                   server or application server (default 10s)\n"
    "  --sapsystem-concurrency N        SapSystems polled at the same time, each on its own\n"
    "                                   schedule: a slow message server holds one slot (at\n"
    "                                   most --sapsystem-timeout per request); N or more\n"
    "                                   hanging ones delay the others (1 to 64, default 4)\n"
    "  --proxy-ack-timeout D            a proxy that has not answered a snapshot for this\n"
    "                                   long is still listed but no longer counted for\n"
    "                                   Programmed (default 30s)\n"
    "  --log-level debug|info|warn|error  (default info)\n"
    "  --log-format text|json           logfmt lines or one JSON object per line (default text)\n"
    "\n"
    "Durations need a unit: 500ms, 2s, 1m, 1h (a bare number is refused). Stdout carries one line, "
    "\"listening HOST:PORT\",\n"
    "once the admin port is bound; logs go to stderr. SIGTERM/SIGINT stop cleanly (exit 0).\n";

struct ServeFlags {
  std::optional<SourceSpec> source;
  std::string kubeconfig;
  std::vector<std::string> namespaces;
  std::string grpc_listen = "127.0.0.1:18000";
  bool grpc_listen_given = false;
  std::string grpc_tls_cert;
  std::string grpc_tls_key;
  std::string grpc_client_ca;
  std::string admin_listen = "127.0.0.1:9902";
  std::vector<std::string> admin_allowed_hosts;
  std::string class_name;
  bool leader_elect = false;
  std::string lease_namespace;
  std::string identity;
  milliseconds lease_duration{15000};
  milliseconds renew_deadline{10000};
  milliseconds retry_period{2000};
  milliseconds hold_off{10};
  milliseconds max_delay{100};
  milliseconds poll_interval{1000};
  milliseconds sapsystem_timeout{10000};
  int sapsystem_concurrency = 4;
  milliseconds proxy_ack_timeout{30000};
  LogLevel log_level = LogLevel::kInfo;
  LogFormat log_format = LogFormat::kText;
};

bool ParseDuration(std::string_view text, milliseconds* out, std::string* error) {
  int64_t ms = 0;
  if (!ParseDurationMs(text, &ms, error)) {
    return false;
  }
  *out = milliseconds(ms);
  return true;
}

// Returns an exit code to stop with (help or usage error), or nullopt.
std::optional<int> ParseServeFlags(const std::vector<std::string>& args, std::ostream& out,
                                   std::ostream& err, ServeFlags* flags) {
  auto usage_error = [&](const std::string& message) {
    err << "kwd-controller serve: " << message << "\n"
        << "Run 'kwd-controller serve --help' for usage.\n";
    return 2;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-h" || arg == "--help") {
      out << kServeUsage;
      return 0;
    }
    if (arg.rfind("--", 0) != 0) {
      return usage_error("unexpected argument " + arg);
    }
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    if (name == "--leader-elect") {
      if (inline_value && *inline_value != "true" && *inline_value != "false") {
        return usage_error("--leader-elect takes no value (or =true/=false)");
      }
      flags->leader_elect = !inline_value || *inline_value == "true";
      continue;
    }
    static constexpr std::string_view kValueFlags[] = {"--source",
                                                       "--kubeconfig",
                                                       "--namespace",
                                                       "--grpc-listen",
                                                       "--grpc-tls-cert",
                                                       "--grpc-tls-key",
                                                       "--grpc-client-ca",
                                                       "--admin-listen",
                                                       "--admin-allowed-hosts",
                                                       "--class",
                                                       "--leader-election-namespace",
                                                       "--leader-election-identity",
                                                       "--lease-duration",
                                                       "--renew-deadline",
                                                       "--retry-period",
                                                       "--hold-off",
                                                       "--max-delay",
                                                       "--poll-interval",
                                                       "--sapsystem-timeout",
                                                       "--sapsystem-concurrency",
                                                       "--proxy-ack-timeout",
                                                       "--log-level",

                                                       "--log-format"};
    if (std::find(std::begin(kValueFlags), std::end(kValueFlags), name) == std::end(kValueFlags)) {
      return usage_error("unknown flag " + name);
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return usage_error(name + " needs a value");
    }
    milliseconds* duration = nullptr;
    if (name == "--source") {
      std::string error;
      flags->source = ParseSource(value, &error);
      if (!flags->source) {
        return usage_error(error);
      }
    } else if (name == "--kubeconfig") {
      flags->kubeconfig = value;
    } else if (name == "--namespace") {
      if (value.empty()) {
        return usage_error("--namespace needs a namespace");
      }
      flags->namespaces.push_back(value);
    } else if (name == "--grpc-listen") {
      flags->grpc_listen = value;
      flags->grpc_listen_given = true;
    } else if (name == "--grpc-tls-cert") {
      flags->grpc_tls_cert = value;
    } else if (name == "--grpc-tls-key") {
      flags->grpc_tls_key = value;
    } else if (name == "--grpc-client-ca") {
      flags->grpc_client_ca = value;
    } else if (name == "--admin-listen") {
      flags->admin_listen = value;
    } else if (name == "--admin-allowed-hosts") {
      std::string error;
      if (!ParseAdminAllowedHosts(value, &flags->admin_allowed_hosts, &error)) {
        return usage_error("--admin-allowed-hosts: " + error);
      }
    } else if (name == "--class") {
      if (!IsClassName(value)) {
        return usage_error(
            "--class: a name of 1 to 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (got \"" +
            value + "\")");
      }
      flags->class_name = value;
    } else if (name == "--leader-election-namespace") {
      flags->lease_namespace = value;
    } else if (name == "--leader-election-identity") {
      flags->identity = value;
    } else if (name == "--lease-duration") {
      duration = &flags->lease_duration;
    } else if (name == "--renew-deadline") {
      duration = &flags->renew_deadline;
    } else if (name == "--retry-period") {
      duration = &flags->retry_period;
    } else if (name == "--hold-off") {
      duration = &flags->hold_off;
    } else if (name == "--max-delay") {
      duration = &flags->max_delay;
    } else if (name == "--poll-interval") {
      duration = &flags->poll_interval;
    } else if (name == "--sapsystem-timeout") {
      duration = &flags->sapsystem_timeout;
    } else if (name == "--sapsystem-concurrency") {
      int n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > 64) {
        return usage_error("--sapsystem-concurrency must be 1 to 64, got \"" + value + "\"");
      }
      flags->sapsystem_concurrency = n;
    } else if (name == "--proxy-ack-timeout") {
      duration = &flags->proxy_ack_timeout;
    } else if (name == "--log-level") {
      if (!ParseLogLevel(value, &flags->log_level)) {
        return usage_error("--log-level must be debug, info, warn or error");
      }
    } else if (name == "--log-format") {
      if (!ParseLogFormat(value, &flags->log_format)) {
        return usage_error("--log-format must be text or json");
      }
    } else {
      return usage_error("unknown flag " + name);
    }
    std::string duration_error;
    if (duration != nullptr && !ParseDuration(value, duration, &duration_error)) {
      return usage_error(name + ": " + duration_error);
    }
  }
  if (!flags->source) {
    return usage_error("missing --source=dir:DIR or --source=kube");
  }
  if (flags->sapsystem_timeout.count() < 1) {
    return usage_error("--sapsystem-timeout must be at least 1ms");
  }
  if (flags->proxy_ack_timeout.count() < 1) {
    return usage_error("--proxy-ack-timeout must be at least 1ms");
  }
  std::string host;
  uint16_t port = 0;
  if (!controller_admin::ParseHostPort(flags->admin_listen, &host, &port)) {
    return usage_error("--admin-listen wants HOST:PORT, got \"" + flags->admin_listen + "\"");
  }
  if (!controller_admin::ParseHostPort(flags->grpc_listen, &host, &port)) {
    return usage_error("--grpc-listen wants HOST:PORT, got \"" + flags->grpc_listen + "\"");
  }
  if (flags->grpc_tls_cert.empty() != flags->grpc_tls_key.empty()) {
    return usage_error("--grpc-tls-cert and --grpc-tls-key go together");
  }
  if (!flags->grpc_client_ca.empty() && flags->grpc_tls_cert.empty()) {
    return usage_error("--grpc-client-ca needs --grpc-tls-cert and --grpc-tls-key");
  }
  if (flags->leader_elect && flags->renew_deadline >= flags->lease_duration) {
    return usage_error("--renew-deadline must be shorter than --lease-duration");
  }
  if (flags->source->type == SourceSpec::Type::kDir &&
      (flags->leader_elect || !flags->namespaces.empty() || !flags->kubeconfig.empty())) {
    return usage_error("--leader-elect, --namespace and --kubeconfig apply to --source=kube only");
  }
  return std::nullopt;
}

std::string DefaultLeaseNamespace() {
  std::ifstream file(std::string(kube::kDefaultServiceAccountDir) + "/namespace");
  std::string ns;
  if (file && std::getline(file, ns) && !ns.empty()) {
    return ns;
  }
  return "default";
}

std::string DefaultIdentity() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "kwd-controller");
  }
  std::random_device random;
  char suffix[16];
  std::snprintf(suffix, sizeof(suffix), "%06x", random() & 0xffffff);
  return std::string(host) + "_" + suffix;
}

// Copies the reflectors' counters into registry counters at scrape time.
class WatchMetrics {
 public:
  WatchMetrics(MetricsRegistry& registry, const pipeline::KubeSource* source)
      : registry_(registry), source_(source) {}

  void Sync() {
    if (source_ == nullptr) {
      return;
    }
    std::lock_guard lock(mu_);
    for (const auto& [kind, stats] : source_->Stats()) {
      Set("kwd_controller_watch_events_total", "Watch events received, by kind and type.",
          {{"kind", kind}, {"type", "ADDED"}}, stats.added);
      Set("kwd_controller_watch_events_total", "Watch events received, by kind and type.",
          {{"kind", kind}, {"type", "MODIFIED"}}, stats.modified);
      Set("kwd_controller_watch_events_total", "Watch events received, by kind and type.",
          {{"kind", kind}, {"type", "DELETED"}}, stats.deleted);
      Set("kwd_controller_watch_events_total", "Watch events received, by kind and type.",
          {{"kind", kind}, {"type", "BOOKMARK"}}, stats.bookmarks);
      Set("kwd_controller_lists_total", "Successful lists (initial and relists), by kind.",
          {{"kind", kind}}, stats.lists);
      Set("kwd_controller_relists_total",
          "Lists after the first (410 Gone, watch ERROR events), by kind.", {{"kind", kind}},
          stats.relists);
      Set("kwd_controller_watch_errors_total",
          "Failed lists and watches (transport, stall, drop, HTTP errors), by kind.",
          {{"kind", kind}}, stats.errors);
    }
  }

 private:
  void Set(std::string_view name, std::string_view help, const Labels& labels, uint64_t value) {
    Counter& counter = registry_.GetCounter(name, help, labels);
    if (value > counter.Value()) {
      counter.Inc(value - counter.Value());
    }
  }

  MetricsRegistry& registry_;
  const pipeline::KubeSource* source_;
  std::mutex mu_;
};

// Events for an object whose status is about to change: a Warning for each
// condition that turns False (or stays False with another reason or message;
// Programmed only when proxies reject it), a Normal "Accepted" when Accepted
// turns True again.
void RecordConditionEvents(kube::EventRecorder& recorder, const compile::ObjectStatus& desired,
                           const nlohmann::json* observed, const std::string& uid) {
  auto observed_condition = [&](const std::string& type) -> const nlohmann::json* {
    if (observed == nullptr || !observed->is_object() || !observed->contains("conditions") ||
        !(*observed)["conditions"].is_array()) {
      return nullptr;
    }
    for (const auto& condition : (*observed)["conditions"]) {
      if (condition.is_object() && condition.value("type", "") == type) {
        return &condition;
      }
    }
    return nullptr;
  };
  kube::EventObjectRef ref{"dispatch.kwd.io/v1alpha1", desired.kind, desired.namespace_,
                           desired.name, uid};
  for (const compile::Condition& condition : desired.conditions) {
    const nlohmann::json* before = observed_condition(condition.type);
    std::string before_status = before ? before->value("status", "") : "";
    std::string action = condition.type == "Accepted" ? "Validate" : "Program";
    // Programmed=False is only news when proxies reject the snapshot; waiting
    // for proxies (NoProxies, Pending) is normal at startup.
    if (condition.type == "Programmed" && condition.reason != "Rejected") {
      continue;
    }
    if (condition.status == "False") {
      if (before_status == "False" && before->value("reason", "") == condition.reason &&
          before->value("message", "") == condition.message) {
        continue;
      }
      recorder.Record(ref, "Warning", condition.reason, action,
                      condition.type + "=False: " + condition.message);
    } else if (condition.status == "True" && condition.type == "Accepted" &&
               before_status == "False") {
      recorder.Record(ref, "Normal", condition.reason, action,
                      "Accepted again: " + condition.message);
    }
  }
}

int Serve(const ServeFlags& flags, std::ostream& out, std::ostream& err) {
  SetLogLevel(flags.log_level);
  SetLogFormat(flags.log_format);

  // Signals are taken by sigwait on this thread; every thread started below
  // inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  MetricsRegistry metrics;
  RegisterStandardMetrics(metrics);
  Gauge& leader_gauge = metrics.GetGauge("kwd_controller_leader",
                                         "1 while this replica writes status (leader), else 0.");
  controller_admin::LatestSnapshot latest;
  snapshot_server::SnapshotServerOptions grpc_options;
  grpc_options.listen = flags.grpc_listen;
  grpc_options.ack_timeout = flags.proxy_ack_timeout;
  if (!flags.grpc_tls_cert.empty()) {
    grpc_options.tls =
        snapshot_server::ServerTls{flags.grpc_tls_cert, flags.grpc_tls_key, flags.grpc_client_ca};
    std::string tls_error;
    if (!snapshot_server::CheckServerTls(*grpc_options.tls, &tls_error)) {
      err << "kwd-controller serve: " << tls_error << "\n";
      return 1;
    }
    if (flags.grpc_client_ca.empty()) {
      Log(LogLevel::kWarn, "serve",
          "the snapshot gRPC port takes any client: give --grpc-client-ca to require proxy "
          "certificates",
          {{"address", flags.grpc_listen}});
    }
  } else {
    Log(LogLevel::kWarn, "serve",
        "the snapshot gRPC port is plain text and open to anyone who reaches it: "
        "give --grpc-tls-cert, --grpc-tls-key and --grpc-client-ca for mutual TLS",
        {{"address", flags.grpc_listen}});
  }
  snapshot_server::SnapshotServer grpc_server(grpc_options, &metrics);
  {
    std::string grpc_error;
    if (!grpc_server.Start(&grpc_error)) {
      // An explicit address that cannot be served is fatal. The default one
      // is not: several controllers on one machine (tests, `make run` next
      // to a test run) would otherwise refuse to start; proxies then cannot
      // connect to this replica, which the log says loudly.
      if (flags.grpc_listen_given) {
        err << "kwd-controller serve: " << grpc_error << "\n";
        return 1;
      }
      Log(LogLevel::kError, "serve", "snapshot gRPC server not started",
          {{"address", flags.grpc_listen}, {"error", grpc_error}});
    }
  }
  snapshot_server::FanOutSink sinks({&latest, &grpc_server});
  pipeline::PipelineOptions pipeline_options;
  pipeline_options.hold_off = flags.hold_off;
  pipeline_options.max_delay = flags.max_delay;
  pipeline_options.class_name = flags.class_name;
  pipeline::Pipeline pipeline(pipeline_options, sinks, &metrics);
  Log(LogLevel::kInfo, "serve", "controller class",
      {{"class", flags.class_name.empty() ? "(none)" : flags.class_name},
       {"programs",
        flags.class_name.empty()
            ? "LogonGroups, UrlMappings and SapSystems without spec.className"
            : "LogonGroups, UrlMappings and SapSystems with spec.className " + flags.class_name}});
  // The gRPC server's callbacks reach the pipeline: stop it first on every return path.
  struct StopGrpcFirst {
    snapshot_server::SnapshotServer& server;
    ~StopGrpcFirst() { server.Stop(); }
  } stop_grpc_first{grpc_server};

  // SapSystems (from either source) are polled; their server lists are one
  // more compile input.
  sapsystem::PollerOptions poller_options;
  poller_options.timeout = flags.sapsystem_timeout;
  poller_options.max_concurrent_polls = flags.sapsystem_concurrency;
  // Refused as instance addresses: this pod's and every connected proxy's
  // (a message server listing a proxy's pod IP and admin port would
  // otherwise make the admin API public).
  poller_options.own_addresses = [&grpc_server] {
    std::vector<sapsystem::IpAddress> own = sapsystem::OwnAddresses();
    for (const snapshot_server::ProxyStatus& proxy : grpc_server.Proxies()) {
      if (auto address = sapsystem::PeerAddress(proxy.peer)) {
        own.push_back(*address);
      }
    }
    return own;
  };
  sapsystem::SapSystemPoller sap_poller(pipeline, poller_options, &metrics);
  pipeline.SetSapSystemObserver([&sap_poller](std::vector<model::SapSystem> systems) {
    sap_poller.SetSystems(std::move(systems));
  });
  pipeline.SetStatusDecorator(
      [&sap_poller](compile::ObjectStatus* status) { sap_poller.Decorate(status); });

  std::unique_ptr<pipeline::DirWatcher> dir_watcher;
  std::unique_ptr<kube::KubeClient> client;
  std::unique_ptr<pipeline::KubeSource> kube_source;
  std::unique_ptr<pipeline::StatusWriter> status_writer;
  std::unique_ptr<kube::LeaderElector> elector;
  std::unique_ptr<snapshot_server::ReplicaReports> reports;
  std::unique_ptr<kube::EventRecorder> events;

  if (flags.source->type == SourceSpec::Type::kDir) {
    std::error_code error;
    if (!std::filesystem::is_directory(flags.source->dir, error)) {
      err << "kwd-controller serve: " << flags.source->dir << " is not a directory\n";
      return 1;
    }
    dir_watcher =
        std::make_unique<pipeline::DirWatcher>(flags.source->dir, pipeline, flags.poll_interval);
  } else {
    kube::KubeConfigSource config_source;
    config_source.kubeconfig_path = flags.kubeconfig;
    kube::KubeConfig config;
    std::string error;
    if (!kube::LoadKubeConfig(config_source, &config, &error)) {
      err << "kwd-controller serve: " << error << "\n";
      return 1;
    }
    client = std::make_unique<kube::KubeClient>(config);
    pipeline::KubeSourceOptions source_options;
    source_options.namespaces = flags.namespaces;
    kube_source = std::make_unique<pipeline::KubeSource>(*client, pipeline, source_options);
    status_writer = std::make_unique<pipeline::StatusWriter>(
        *client, pipeline::StatusWriterOptions{}, &metrics);
    pipeline.SetStatusWriter(status_writer.get());
    // Programmed follows what the connected proxies ACK and NACK.
    pipeline.SetExtraConditions([&grpc_server](const compile::ObjectStatus& object) {
      if (object.kind == model::kSapSystemKind) {
        return std::vector<compile::Condition>{};  // not programmed into proxies itself
      }
      return std::vector<compile::Condition>{grpc_server.ProgrammedFor(object)};
    });
    grpc_server.SetOnProxiesChanged([&pipeline] { pipeline.ResyncStatus(); });
    std::string identity = flags.identity.empty() ? DefaultIdentity() : flags.identity;
    kube::EventRecorderOptions event_options;
    event_options.reporting_instance = identity;
    events = std::make_unique<kube::EventRecorder>(*client, event_options);
    pipeline.SetStatusObserver([recorder = events.get()](const compile::ObjectStatus& desired,
                                                         const nlohmann::json* observed,
                                                         const std::string& uid) {
      RecordConditionEvents(*recorder, desired, observed, uid);
    });
    if (flags.leader_elect) {
      kube::LeaderElectionConfig election;
      election.lease_namespace =
          flags.lease_namespace.empty() ? DefaultLeaseNamespace() : flags.lease_namespace;
      if (!flags.class_name.empty()) {
        // Each class elects its own leader: two installs in one namespace
        // must not share a Lease (one of them would never write status).
        election.lease_name += "-" + flags.class_name;
      }
      election.identity = identity;
      election.lease_duration = flags.lease_duration;
      election.renew_deadline = flags.renew_deadline;
      election.retry_period = flags.retry_period;
      Log(LogLevel::kInfo, "leader", "leader election enabled",
          {{"lease", election.lease_namespace + "/" + election.lease_name},
           {"identity", election.identity}});
      kube::LeaderCallbacks callbacks;
      pipeline::StatusWriter* writer = status_writer.get();
      kube::EventObjectRef lease{"coordination.k8s.io/v1", "Lease", election.lease_namespace,
                                 election.lease_name, ""};
      kube::EventRecorder* recorder = events.get();
      callbacks.on_started_leading = [writer, &pipeline, &leader_gauge, recorder, lease, identity] {
        Log(LogLevel::kInfo, "leader", "started leading: writing status");
        writer->SetLeader(true);
        leader_gauge.Set(1);
        recorder->Record(lease, "Normal", "LeaderElected", "LeaderElection",
                         identity + " became leader: it writes status and events");
        pipeline.ResyncStatus();
      };
      callbacks.on_stopped_leading = [writer, &leader_gauge, recorder, lease, identity] {
        writer->SetLeader(false);
        leader_gauge.Set(0);
        recorder->Record(lease, "Normal", "LeadershipLost", "LeaderElection",
                         identity + " stopped leading");
        Log(LogLevel::kInfo, "leader", "stopped leading: status writes stopped");
      };
      callbacks.on_new_leader = [](const std::string& identity) {
        Log(LogLevel::kInfo, "leader", "observed leader", {{"identity", identity}});
      };
      elector = std::make_unique<kube::LeaderElector>(*client, election, callbacks);
      // The leader writes Programmed: it has to count the proxies of every replica.
      snapshot_server::ReplicaReportsOptions report_options;
      report_options.lease_namespace = election.lease_namespace;
      report_options.identity = election.identity;
      report_options.period = election.retry_period;
      report_options.expiry = election.lease_duration;
      reports =
          std::make_unique<snapshot_server::ReplicaReports>(*client, grpc_server, report_options);
    } else {
      status_writer->SetLeader(true);
      leader_gauge.Set(1);
    }
  }

  WatchMetrics watch_metrics(metrics, kube_source.get());
  controller_admin::AdminHandlers handlers;
  handlers.metrics = [&] {
    watch_metrics.Sync();
    return metrics.Render();
  };
  handlers.ready = [&] { return pipeline.ready(); };
  handlers.snapshot = [&]() -> std::optional<std::string> {
    auto result = latest.Get();
    if (!result) {
      return std::nullopt;
    }
    return SnapshotToJson(result->snapshot);
  };
  handlers.objects = [&]() -> std::optional<std::string> {
    auto result = pipeline.current();
    if (!result) {
      return std::nullopt;
    }
    return pipeline::ObjectsJson(*result);
  };
  handlers.state = [&] { return controller_admin::StateJson(latest, grpc_server, pipeline); };
  controller_admin::AdminOptions admin_options;
  controller_admin::ParseHostPort(flags.admin_listen, &admin_options.host, &admin_options.port);
  admin_options.limits.allowed_hosts = flags.admin_allowed_hosts;
  controller_admin::AdminServer admin(admin_options, handlers);
  std::string error;
  if (!admin.Start(&error)) {
    err << "kwd-controller serve: " << error << "\n";
    return 1;
  }
  out << "listening " << flags.admin_listen << "\n";
  out.flush();
  Log(LogLevel::kInfo, "serve", "admin port listening", {{"address", flags.admin_listen}});

  std::jthread pipeline_thread([&](std::stop_token stop) { pipeline.Run(stop); });
  std::jthread sap_poller_thread([&](std::stop_token stop) { sap_poller.Run(stop); });
  std::jthread writer_thread;
  std::jthread elector_thread;
  std::jthread reports_thread;
  std::jthread events_thread;
  std::jthread dir_thread;
  if (dir_watcher) {
    dir_thread = std::jthread([&](std::stop_token stop) { dir_watcher->Run(stop); });
  } else {
    kube_source->Start();
    writer_thread = std::jthread([&](std::stop_token stop) { status_writer->Run(stop); });
    if (elector) {
      elector_thread = std::jthread([&](std::stop_token stop) { elector->Run(stop); });
    }
    if (reports) {
      reports_thread = std::jthread([&](std::stop_token stop) { reports->Run(stop); });
    }
    events_thread = std::jthread([&](std::stop_token stop) { events->Run(stop); });
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  Log(LogLevel::kInfo, "serve", "stopping", {{"signal", signal_number == SIGINT ? "INT" : "TERM"}});

  // The lease first, so another replica takes over without waiting it out.
  if (elector_thread.joinable()) {
    elector_thread.request_stop();
    elector_thread.join();
  }
  // Then this replica's proxy report (deleted on the way out).
  if (reports_thread.joinable()) {
    reports_thread.request_stop();
    reports_thread.join();
  }
  if (status_writer) {
    status_writer->SetLeader(false);
  }
  if (kube_source) {
    kube_source->Stop();
  }
  if (dir_thread.joinable()) {
    dir_thread.request_stop();
    dir_thread.join();
  }
  if (writer_thread.joinable()) {
    writer_thread.request_stop();
    writer_thread.join();
  }
  sap_poller_thread.request_stop();
  sap_poller_thread.join();
  pipeline_thread.request_stop();
  pipeline_thread.join();
  if (events_thread.joinable()) {
    events_thread.request_stop();
    events_thread.join();
    events->Flush();  // e.g. LeadershipLost
  }
  grpc_server.Stop();
  admin.Stop();
  Log(LogLevel::kInfo, "serve", "stopped");
  return 0;
}

}  // namespace

int RunServe(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ServeFlags flags;
  if (auto code = ParseServeFlags(args, out, err, &flags)) {
    return *code;
  }
  return Serve(flags, out, err);
}

}  // namespace kwd::cli
