#include "controller/sapsystem/poller.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netdb.h>
#include <ifaddrs.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/snapshot_io.h"
#include "controller/pipeline/status.h"

namespace kwd::sapsystem {
namespace {

// Refreshed reasons.
constexpr std::string_view kReasonRefreshed = "Refreshed";
constexpr std::string_view kReasonUnreachable = "Unreachable";
constexpr std::string_view kReasonTimeout = "Timeout";
constexpr std::string_view kReasonHttpError = "HTTPError";
constexpr std::string_view kReasonInvalidServerList = "InvalidServerList";
constexpr std::string_view kReasonEmptyList = "EmptyList";
constexpr std::string_view kReasonGroupInfoFailed = "GroupInfoFailed";
constexpr std::string_view kReasonUrlMapFailed = "UrlMapFailed";

// Application servers asked for the group information before giving up.
constexpr int kMaxGroupInfoAttempts = 3;

void InitCurl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Body {
  std::string data;
  bool too_large = false;
};

size_t OnBody(char* ptr, size_t size, size_t count, void* user) {
  auto* body = static_cast<Body*>(user);
  size_t n = size * count;
  if (body->data.size() + n > kMaxBodyBytes) {
    body->too_large = true;
    return 0;  // aborts the transfer
  }
  body->data.append(ptr, n);
  return n;
}

std::string Label(const model::ObjectSet::NamespacedName& key) {
  return key.first + "/" + key.second;
}

// A failure: the last good list stays, Refreshed=False says why.
PollOutcome Failed(const model::SapServerList& previous, std::string_view reason,
                   const std::string& message) {
  PollOutcome outcome;
  outcome.failed = true;
  outcome.list = previous;
  outcome.list.refreshed = false;
  outcome.list.reason = std::string(reason);
  outcome.list.message = EscapeControlCharacters(message) +
                         (previous.has_list ? "; keeping the last good list of " +
                                                  std::to_string(previous.instances.size()) +
                                                  " instances"
                                            : "");
  return outcome;
}

// Why a fetch failed, or nullopt when it gave HTTP 200.
std::optional<std::pair<std::string_view, std::string>> FetchProblem(const FetchResult& fetched,
                                                                     const std::string& url) {
  if (fetched.too_large) {
    return std::pair{kReasonInvalidServerList,
                     "GET " + url + ": body larger than " + std::to_string(kMaxBodyBytes) +
                         " bytes"};
  }
  if (fetched.timed_out) {
    return std::pair{kReasonTimeout, "GET " + url + ": " + fetched.error};
  }
  if (!fetched.error.empty()) {
    return std::pair{kReasonUnreachable, "GET " + url + ": " + fetched.error};
  }
  if (fetched.status != 200) {
    return std::pair{kReasonHttpError, "GET " + url + ": HTTP " + std::to_string(fetched.status)};
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> ResolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  std::vector<std::string> v4;
  std::vector<std::string> v6;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) {
    return {};
  }
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
      v4.emplace_back(text);
    } else if (ai->ai_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
      v6.emplace_back(text);
    }
  }
  freeaddrinfo(result);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

std::vector<IpAddress> OwnAddresses() {
  std::vector<IpAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    Log(LogLevel::kWarn, "sapsystem", "cannot read this host's addresses (getifaddrs)",
        {{"error", std::strerror(errno)}});
    return out;
  }
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr) {
      continue;
    }
    char text[INET6_ADDRSTRLEN] = {};
    if (entry->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr, text,
                sizeof(text));
    } else if (entry->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(entry->ifa_addr)->sin6_addr, text,
                sizeof(text));
    } else {
      continue;
    }
    if (auto address = ParseIpAddress(text)) {
      out.push_back(*address);
    }
  }
  freeifaddrs(list);
  return out;
}

FetchResult Fetch(const std::string& url, std::chrono::milliseconds timeout,
                  const std::string& ca_bundle, const std::string& pinned_address) {
  InitCurl();
  FetchResult result;
  CURL* easy = curl_easy_init();
  if (easy == nullptr) {
    result.error = "cannot create a curl handle";
    return result;
  }
  Body body;
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "kwd-controller");
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_blob ca{};
  if (!ca_bundle.empty()) {
    ca.data = const_cast<char*>(ca_bundle.data());
    ca.len = ca_bundle.size();
    ca.flags = CURL_BLOB_COPY;
    curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &ca);
  }
  curl_slist* resolve = nullptr;
  if (!pinned_address.empty()) {
    // "host:port:address" for the URL's own host and port.
    CURLU* parsed = curl_url();
    char* host = nullptr;
    char* port = nullptr;
    if (curl_url_set(parsed, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK &&
        curl_url_get(parsed, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(parsed, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
      std::string address = pinned_address.find(':') != std::string::npos
                                ? "[" + pinned_address + "]"
                                : pinned_address;
      std::string entry = std::string(host) + ":" + port + ":" + address;
      resolve = curl_slist_append(nullptr, entry.c_str());
      curl_easy_setopt(easy, CURLOPT_RESOLVE, resolve);
    }
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(parsed);
    if (resolve == nullptr) {
      curl_easy_cleanup(easy);
      result.error = "cannot pin the address of " + url;
      return result;
    }
  }
  CURLcode code = curl_easy_perform(easy);
  curl_slist_free_all(resolve);
  if (code == CURLE_OK) {
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &result.status);
    result.body = std::move(body.data);
  } else if (body.too_large) {
    result.too_large = true;
  } else {
    result.timed_out = code == CURLE_OPERATION_TIMEDOUT;
    result.error = curl_easy_strerror(code);  // stable text: no timings or byte counts
  }
  curl_easy_cleanup(easy);
  return result;
}

PollOutcome ApplyServerList(std::string_view body, const std::string& source,
                            const model::SapServerList& previous, const Resolver& resolve,
                            const AddressPolicy& policy) {
  ParsedServerList parsed = ParseServerList(body);
  if (!parsed.ok) {
    return Failed(previous, kReasonInvalidServerList,
                  source + ": not a server list: " + parsed.error);
  }
  PollOutcome outcome;
  outcome.skips = parsed.skips;
  std::vector<model::SapInstance> instances =
      BuildInstances(parsed, resolve, &policy, previous.has_list ? &previous.instances : nullptr,
                     &outcome.skips);
  if (instances.empty() && previous.has_list && !previous.instances.empty()) {
    std::string why = parsed.instances.empty() ? "the list is empty"
                                               : "no usable instance: " + outcome.skips.Summary();
    PollOutcome failed = Failed(previous, kReasonEmptyList, source + ": " + why);
    failed.skips = std::move(outcome.skips);
    return failed;
  }
  outcome.list = previous;
  outcome.list.has_list = true;
  outcome.list.instances = std::move(instances);
  outcome.list.refreshed = true;
  outcome.list.reason = std::string(kReasonRefreshed);
  std::size_t n = outcome.list.instances.size();
  outcome.list.message = std::to_string(n) + (n == 1 ? " instance" : " instances") + " from " +
                         source;
  if (parsed.minor != 2) {
    outcome.list.message += " (list version 1." + std::to_string(parsed.minor) + ")";
  }
  if (std::string skipped = outcome.skips.Summary(); !skipped.empty()) {
    outcome.list.message += "; " + skipped;
  }
  outcome.list.message = EscapeControlCharacters(outcome.list.message);
  return outcome;
}

namespace {

// GETs `path` from the application servers of `list` in turn (at most
// kMaxGroupInfoAttempts) until `accept` takes a 200 body (returns ""). Only
// instances of the list are asked, at the address the address policy
// accepted (BuildInstances). Over HTTPS when the message server is reached
// over HTTPS (the instance's HTTPS port, its host name verified against
// the same CAs, connected to that address); else over the instance's HTTP
// port, or HTTPS when it has none. Returns "" on success, else why the last
// one failed.
std::string AskApplicationServers(
    const model::SapServerList& list, const SapSystemConfig& config, const std::string& path,
    std::chrono::milliseconds timeout,
    const std::function<std::string(const std::string& url, std::string_view body)>& accept) {
  std::string error = config.https ? "no instance with an HTTPS port to ask (the message server "
                                     "is reached over HTTPS, so the feeds are too)"
                                   : "no instance with an HTTP or HTTPS port to ask";
  int attempts = 0;
  for (const model::SapInstance& instance : list.instances) {
    if (attempts == kMaxGroupInfoAttempts) {
      break;
    }
    if (instance.address.empty()) {
      continue;
    }
    const bool https = config.https || instance.http_port == 0;
    const std::uint32_t port = https ? instance.https_port : instance.http_port;
    if (port == 0) {
      continue;
    }
    ++attempts;
    std::string url = ServerUrl(https, https ? instance.host : instance.address, port, path);
    FetchResult fetched =
        Fetch(url, timeout, config.ca_bundle, https ? instance.address : std::string());
    if (auto problem = FetchProblem(fetched, url)) {
      error = problem->second;
      continue;
    }
    error = accept(url, fetched.body);
    if (error.empty()) {
      return "";
    }
  }
  return error;
}

}  // namespace

PollOutcome PollOnce(const SapSystemConfig& config, const model::SapServerList& previous,
                     std::chrono::milliseconds timeout, const Resolver& resolve,
                     const std::vector<IpAddress>& own_addresses) {
  const AddressPolicy policy{config.allowed_networks, own_addresses};
  // The last good list as the current policy allows it: a narrowed
  // allowedNetworks (or a new proxy address) also applies to the instances
  // kept when this poll fails.
  model::SapServerList kept = previous;
  std::erase_if(kept.instances, [&](const model::SapInstance& instance) {
    return !instance.address.empty() && !RefusalReason(policy, instance.address).empty();
  });
  const std::string url = ServerListUrl(config);
  FetchResult fetched = Fetch(url, timeout, config.ca_bundle);
  if (auto problem = FetchProblem(fetched, url)) {
    return Failed(kept, problem->first, problem->second);
  }
  PollOutcome outcome = ApplyServerList(fetched.body, url, kept, resolve, policy);
  if (outcome.failed) {
    return outcome;
  }
  // What the failed feeds (group information, URL map) add to the message;
  // the first failure names the reason.
  std::string feed_errors;
  std::string_view failed_reason;
  if (config.logon_groups) {
    // SMLG groups from an application server of the list (the message
    // server does not serve them), the next one on failure.
    std::string group_error = AskApplicationServers(
        outcome.list, config, config.group_info_path, timeout,
        [&](const std::string& group_url, std::string_view body) -> std::string {
          ParsedGroupInfo parsed = ParseGroupInfo(body);
          if (!parsed.ok) {
            return group_url + ": not group information: " + parsed.error;
          }
          outcome.list.has_groups = true;
          outcome.list.logon_groups = std::move(parsed.groups);
          outcome.list.message += "; " + std::to_string(outcome.list.logon_groups.size()) +
                                  " logon groups from " + group_url;
          if (std::string skipped = parsed.skips.Summary(); !skipped.empty()) {
            outcome.list.message += " (" + skipped + ")";
          }
          return "";
        });
    if (!group_error.empty()) {
      failed_reason = kReasonGroupInfoFailed;
      feed_errors += "; logon groups not refreshed: " + group_error +
                     (outcome.list.has_groups ? " (keeping the last good groups)" : "");
    }
  }
  if (config.url_map) {
    // The ICF URL prefixes, from an application server too.
    std::string map_error = AskApplicationServers(
        outcome.list, config, config.url_map_path, timeout,
        [&](const std::string& map_url, std::string_view body) -> std::string {
          ParsedUrlMap parsed = ParseUrlMap(body);
          if (!parsed.ok) {
            return map_url + ": not a URL map: " + parsed.error;
          }
          outcome.list.has_url_map = true;
          outcome.list.url_prefixes = std::move(parsed.prefixes);
          std::size_t n = outcome.list.url_prefixes.size();
          outcome.list.message += "; " + std::to_string(n) +
                                  (n == 1 ? " URL prefix from " : " URL prefixes from ") + map_url;
          if (std::string skipped = parsed.skips.Summary(); !skipped.empty()) {
            outcome.list.message += " (" + skipped + ")";
          }
          for (const auto& [reason, count] : parsed.skips.counts) {
            outcome.skips.counts[reason] += count;
          }
          return "";
        });
    if (!map_error.empty()) {
      if (failed_reason.empty()) {
        failed_reason = kReasonUrlMapFailed;
      }
      feed_errors += "; URL map not refreshed: " + map_error +
                     (outcome.list.has_url_map ? " (keeping the last good URL prefixes)" : "");
    }
  }
  if (!failed_reason.empty()) {
    outcome.failed = true;
    outcome.list.refreshed = false;
    outcome.list.reason = std::string(failed_reason);
    outcome.list.message += feed_errors;
  }
  outcome.list.message = EscapeControlCharacters(outcome.list.message);
  return outcome;
}

SapSystemPoller::SapSystemPoller(pipeline::Pipeline& pipeline, PollerOptions options,
                                 MetricsRegistry* metrics)
    : pipeline_(pipeline),
      options_(std::move(options)),
      metrics_(metrics),
      source_(pipeline.AddSource("SapSystem poller")) {}

void SapSystemPoller::SetSystems(std::vector<model::SapSystem> systems) {
  std::vector<model::ObjectKey> removed;
  {
    std::lock_guard lock(mu_);
    std::map<NamespacedName, System> next;
    const auto now = std::chrono::steady_clock::now();
    for (model::SapSystem& object : systems) {
      NamespacedName key{object.metadata.namespace_, object.metadata.name};
      SpecCheck check = CheckSapSystem(object);
      if (!IsNamespaceName(key.first) || !IsObjectName(key.second)) {
        check.config.reset();
      }
      System system;
      if (auto it = systems_.find(key); it != systems_.end()) {
        system = std::move(it->second);
        systems_.erase(it);
        if (system.config != check.config) {
          system.next_due = now;  // a new spec: poll now
        }
      } else {
        system.next_due = now;
      }
      system.object = std::move(object);
      system.config = std::move(check.config);
      next.emplace(std::move(key), std::move(system));
    }
    for (const auto& [key, system] : systems_) {
      if (system.delivered) {
        removed.push_back({std::string(model::kSapServerListKind), key.first, key.second});
      }
    }
    systems_ = std::move(next);
    have_systems_ = true;
    ++generation_;
    if (metrics_ != nullptr) {
      std::vector<std::string> labels;
      for (const auto& [key, system] : systems_) {
        labels.push_back(Label(key));
      }
      for (std::string_view name :
           {"kwd_controller_sapsystem_servers", "kwd_controller_sapsystem_refresh_errors_total",
            "kwd_controller_sapsystem_refreshes_total",
            "kwd_controller_sapsystem_entries_skipped"}) {
        metrics_->RetainLabelValues(name, "sapsystem", labels);
      }
    }
  }
  std::lock_guard deliver(deliver_mu_);
  for (model::ObjectKey& key : removed) {
    Log(LogLevel::kInfo, "sapsystem", "SapSystem removed: its servers leave",
        {{"sapsystem", key.namespace_ + "/" + key.name}});
    pipeline_.Delete(std::move(key));
  }
  wake_.notify_all();
}

void SapSystemPoller::Decorate(compile::ObjectStatus* status) const {
  if (status->kind != model::kSapSystemKind) {
    return;
  }
  std::lock_guard lock(mu_);
  auto it = systems_.find({status->namespace_, status->name});
  if (it != systems_.end()) {
    status->last_refresh_time = it->second.last_refresh_time;
  }
}

void SapSystemPoller::Publish(const NamespacedName& key, const PollOutcome& outcome) {
  if (metrics_ == nullptr) {
    return;
  }
  const std::string label = Label(key);
  metrics_
      ->GetCounter("kwd_controller_sapsystem_refreshes_total",
                   "Polls of a SapSystem's message server (successful or not).",
                   {{"sapsystem", label}})
      .Inc();
  Counter& errors = metrics_->GetCounter(
      "kwd_controller_sapsystem_refresh_errors_total",
      "Failed polls of a SapSystem (transport, timeout, HTTP status, not a server list, empty "
      "list, group information); the last good list stays.",
      {{"sapsystem", label}});
  if (outcome.failed) {
    errors.Inc();
  }
  metrics_
      ->GetGauge("kwd_controller_sapsystem_servers",
                 "Instances in a SapSystem's last good server list.", {{"sapsystem", label}})
      .Set(static_cast<double>(outcome.list.instances.size()));
  for (SkipReason reason : kAllSkipReasons) {
    auto count = outcome.skips.counts.find(reason);
    metrics_
        ->GetGauge("kwd_controller_sapsystem_entries_skipped",
                   "Entries of a SapSystem's last server list or group information that were "
                   "skipped, by reason.",
                   {{"sapsystem", label}, {"reason", std::string(SkipReasonName(reason))}})
        .Set(count == outcome.skips.counts.end() ? 0.0 : static_cast<double>(count->second));
  }
}

void SapSystemPoller::Run(std::stop_token stop) {
  // Every worker schedules for itself: it takes the system due first that
  // no other worker is polling. A slow message server holds one worker,
  // the others keep the rest on time.
  const int workers = std::max(1, options_.max_concurrent_polls);
  std::vector<std::jthread> others;
  for (int i = 1; i < workers; ++i) {
    others.emplace_back([this, stop] { Work(stop); });
  }
  Work(stop);
  // `others` joins here; each stops on `stop` (a poll in progress first
  // finishes, bounded by the request timeout).
}

void SapSystemPoller::Work(std::stop_token stop) {
  const Resolver& resolve = options_.resolve ? options_.resolve : Resolver(ResolveHost);
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    if (!have_systems_) {
      wake_.wait(lock, stop, [&] { return have_systems_; });
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    System* chosen = nullptr;
    NamespacedName chosen_key;
    std::optional<std::chrono::steady_clock::time_point> earliest;
    int in_flight = 0;
    for (auto& [key, system] : systems_) {
      if (!system.config) {
        continue;
      }
      if (system.in_flight) {
        ++in_flight;
        continue;
      }
      if (system.next_due <= now) {
        if (chosen == nullptr || system.next_due < chosen->next_due) {
          chosen = &system;
          chosen_key = key;
        }
      } else if (!earliest || system.next_due < *earliest) {
        earliest = system.next_due;
      }
    }
    if (chosen == nullptr) {
      if (!synced_ && in_flight == 0) {
        // Every polled system has its first result (or there is none): the
        // first compile may go.
        lock.unlock();
        {
          std::lock_guard deliver(deliver_mu_);
          std::vector<pipeline::ObservedObject> lists;
          bool first = false;
          {
            std::lock_guard relock(mu_);
            if (!synced_) {
              for (const auto& [key, system] : systems_) {
                if (system.delivered) {
                  lists.push_back(pipeline::ObservedObject{system.list, nullptr});
                }
              }
              synced_ = true;
              first = true;
            }
          }
          if (first) {
            pipeline_.Replace(source_, std::string(model::kSapServerListKind), "",
                              std::move(lists));
          }
        }
        lock.lock();
        wake_.notify_all();
        continue;
      }
      std::uint64_t generation = generation_;
      if (earliest) {
        wake_.wait_until(lock, stop, *earliest, [&] { return generation_ != generation; });
      } else {
        wake_.wait(lock, stop, [&] { return generation_ != generation; });
      }
      continue;
    }
    chosen->in_flight = true;
    const SapSystemConfig config = *chosen->config;
    model::SapServerList previous = chosen->list;
    previous.metadata.namespace_ = chosen_key.first;
    previous.metadata.name = chosen_key.second;
    lock.unlock();

    const std::vector<IpAddress> own =
        options_.own_addresses ? options_.own_addresses() : OwnAddresses();
    PollOutcome outcome = PollOnce(config, previous, options_.timeout, resolve, own);
    const std::string label = Label(chosen_key);
    if (outcome.failed) {
      Log(LogLevel::kWarn, "sapsystem", "refresh failed",
          {{"sapsystem", label}, {"reason", outcome.list.reason}, {"message", outcome.list.message}});
    } else if (outcome.list != previous) {
      Log(LogLevel::kInfo, "sapsystem", "server list changed",
          {{"sapsystem", label},
           {"servers", std::to_string(outcome.list.instances.size())},
           {"message", outcome.list.message}});
    }
    const std::string refreshed_at = pipeline::FormatTime(std::chrono::system_clock::now());

    std::unique_lock deliver(deliver_mu_);
    lock.lock();
    auto it = systems_.find(chosen_key);
    if (it == systems_.end()) {
      continue;  // removed meanwhile
    }
    System& system = it->second;
    system.in_flight = false;
    if (system.config != config) {
      continue;  // changed meanwhile: due again at once (SetSystems)
    }
    Publish(chosen_key, outcome);  // metrics; not for a system removed meanwhile
    auto refused = outcome.skips.counts.find(SkipReason::kRefusedAddress);
    std::size_t refused_count = refused == outcome.skips.counts.end() ? 0 : refused->second;
    if (refused_count != system.refused_logged) {
      // Once per change, not every poll: which instances were refused is
      // in Refreshed's message and the skipped-entries metric.
      system.refused_logged = refused_count;
      if (refused_count > 0) {
        Log(LogLevel::kWarn, "sapsystem", "instances skipped: address refused",
            {{"sapsystem", label},
             {"skipped", std::to_string(refused_count)},
             {"message", outcome.skips.Summary()}});
      }
    }
    system.next_due = std::chrono::steady_clock::now() +
                      std::chrono::seconds(config.refresh_interval_seconds);
    if (outcome.list.refreshed) {
      system.last_refresh_time = refreshed_at;
    }
    bool deliver_now = false;
    if (!system.delivered || system.list != outcome.list) {
      system.list = outcome.list;
      deliver_now = synced_;  // before the first sync: delivered all at once
    }
    system.delivered = true;
    const bool synced = synced_;
    lock.unlock();
    // A list equal to the one delivered before is not delivered again: a
    // refresh that changes nothing compiles nothing.
    if (deliver_now) {
      pipeline_.Upsert(pipeline::ObservedObject{std::move(outcome.list), nullptr});
    }
    if (synced) {
      pipeline_.ResyncStatus();  // lastRefreshTime
    }
    deliver.unlock();
    lock.lock();
    wake_.notify_all();  // a worker waiting for the first sync may go
  }
}

}  // namespace kwd::sapsystem
