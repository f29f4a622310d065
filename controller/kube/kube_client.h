#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "controller/kube/clock.h"
#include "controller/kube/kube_config.h"

namespace kwd::kube {

// The outcome of one API call, decoded from the `Status` body on errors.
struct ApiStatus {
  long http_code = 0;   // 0: no HTTP answer (transport failure, stall, stop)
  std::string reason;   // Status.reason ("NotFound", "Conflict", "Expired", ...),
                        // or "Transport", "Stalled", "Stopped", "BadResponse"
  std::string message;  // human-readable, for logs and conditions

  bool ok() const { return http_code >= 200 && http_code < 300; }
  bool IsNotFound() const { return http_code == 404; }
  bool IsConflict() const { return http_code == 409; }
  bool IsGone() const { return http_code == 410; }
  std::string ToString() const;
};

struct ApiResult {
  ApiStatus status;
  nlohmann::json body;  // the object on success, the Status object on an API error, else null
};

struct ListResult {
  ApiStatus status;
  std::vector<nlohmann::json> items;
  std::string resource_version;  // where a watch of this collection starts
  int pages = 0;
  int restarts = 0;  // lists restarted because a continue token expired (410)
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark };
std::string_view WatchEventTypeName(WatchEventType type);

// Called on the watching thread for each event, in order.
using WatchCallback = std::function<void(WatchEventType type, const nlohmann::json& object)>;

struct WatchOptions {
  std::string resource_version;  // opaque; empty or "0" asks for synthetic ADDED events first
  std::string label_selector;
  int timeout_seconds = 300;  // the server ends the stream after this long
  // No byte at all for this long means a dead stream (libcurl low-speed limit,
  // whole seconds). Bookmarks keep a healthy idle stream alive.
  std::chrono::seconds stall_timeout{90};
  bool allow_bookmarks = true;
};

enum class WatchEnd {
  kStopped,       // the stop token fired
  kClosed,        // the server ended the stream normally: resume from last_resource_version
  kRelistNeeded,  // ERROR event or HTTP 410: list again
  kFailed,        // transport error, stall, drop or HTTP error: back off, then resume
};
std::string_view WatchEndName(WatchEnd end);

struct WatchResult {
  WatchEnd end = WatchEnd::kFailed;
  ApiStatus status;
  std::string last_resource_version;  // of the last event or bookmark; the request's when none
  int events = 0;
};

struct ClientOptions {
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds connect_timeout{5000};
  int page_size = 500;
  int max_list_restarts = 3;
  int max_throttle_retries = 3;              // 429 answers retried after Retry-After
  std::chrono::seconds max_retry_after{30};  // cap on a server's Retry-After
  std::chrono::nanoseconds token_refresh_interval = std::chrono::minutes(1);
  std::string user_agent = "kwd-controller";
  std::shared_ptr<const Clock> clock;  // default: RealClock
  std::shared_ptr<Sleeper> sleeper;    // waits for Retry-After; default: RealSleeper
};

// A small Kubernetes API client on libcurl. Thread-safe: each call borrows a
// connection from a pool, so watches on several threads and writes from
// another proceed in parallel. Paths are API paths such as
// "/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/logongroups".
class KubeClient {
 public:
  explicit KubeClient(KubeConfig config, ClientOptions options = {});
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  const KubeConfig& config() const { return config_; }

  ApiResult Get(std::string_view path);
  ApiResult Post(std::string_view path, const nlohmann::json& body);
  ApiResult Put(std::string_view path, const nlohmann::json& body);
  ApiResult Patch(std::string_view path, const nlohmann::json& body, std::string_view content_type);
  ApiResult Delete(std::string_view path);

  // PATCH <object_path>/status with application/merge-patch+json.
  ApiResult MergePatchStatus(std::string_view object_path, const nlohmann::json& patch);

  // Every page (limit=page_size, continue tokens) of a collection; restarts the
  // list from scratch when a continue token has expired (410).
  ListResult List(std::string_view path, std::string_view label_selector = {},
                  std::stop_token stop = {});

  // One watch request; returns when the stream ends, fails or `stop` fires
  // (promptly: the transfer loop wakes on the stop request).
  WatchResult Watch(std::string_view path, const WatchOptions& options,
                    const WatchCallback& callback, std::stop_token stop = {});

  // coordination.k8s.io/v1 Leases. UpdateLease PUTs `lease` as is: it must carry
  // the resourceVersion that was read, and a stale one answers IsConflict().
  // `timeout` (0: ClientOptions::request_timeout) bounds a call by the
  // elector's renew deadline.
  ApiResult GetLease(std::string_view ns, std::string_view name,
                     std::chrono::milliseconds timeout = {});
  ApiResult CreateLease(std::string_view ns, const nlohmann::json& lease,
                        std::chrono::milliseconds timeout = {});
  ApiResult UpdateLease(std::string_view ns, std::string_view name, const nlohmann::json& lease,
                        std::chrono::milliseconds timeout = {});

  struct Session;
  struct Transfer;

 private:
  std::unique_ptr<Session> Borrow();
  void Return(std::unique_ptr<Session> session);
  // Runs one request with the 401 re-read and 429 retry policies.
  void Execute(Transfer& transfer);
  ApiResult Simple(const char* method, std::string_view path, const nlohmann::json* body,
                   std::string_view content_type, std::chrono::milliseconds timeout = {});

  const KubeConfig config_;
  const ClientOptions options_;
  std::shared_ptr<const Clock> clock_;
  std::shared_ptr<Sleeper> sleeper_;
  TokenSource tokens_;
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<Session>> idle_sessions_;
};

// Percent-encodes a query parameter value.
std::string EscapeQueryValue(std::string_view value);

}  // namespace kwd::kube
