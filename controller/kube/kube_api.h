#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

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
  // A quiet stream is healthy: an API server (1.28) sends no bookmark to a
  // watch until its resource type moves past the watch's starting version,
  // which on a quiet cluster can take ten minutes and more. So silence is
  // never a failure; a stream the server has not ended timeout_seconds +
  // deadline_grace after the request is abandoned as stalled (a hung server
  // that keeps its TCP connection; a dead peer is found earlier by TCP
  // keepalive).
  std::chrono::seconds deadline_grace{30};
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

// The Kubernetes API as the reflector, the leader elector and the status
// writer use it: the seam where tests substitute a fake. KubeClient is the
// real implementation.
// The collection path of coordination.k8s.io/v1 Leases in `ns`.
inline std::string LeasesPath(std::string_view ns) {
  return "/apis/coordination.k8s.io/v1/namespaces/" + std::string(ns) + "/leases";
}

class KubeApi {
 public:
  virtual ~KubeApi() = default;

  virtual ApiResult Get(std::string_view path) = 0;
  virtual ApiResult Post(std::string_view path, const nlohmann::json& body) = 0;
  virtual ApiResult Put(std::string_view path, const nlohmann::json& body) = 0;
  virtual ApiResult Patch(std::string_view path, const nlohmann::json& body,
                          std::string_view content_type) = 0;
  virtual ApiResult Delete(std::string_view path) = 0;

  // PATCH <object_path>/status with application/merge-patch+json.
  virtual ApiResult MergePatchStatus(std::string_view object_path, const nlohmann::json& patch) = 0;

  // Every page (limit, continue tokens) of a collection; restarts the list
  // from scratch when a continue token has expired (410).
  virtual ListResult List(std::string_view path, std::string_view label_selector = {},
                          std::stop_token stop = {}) = 0;

  // One watch request; returns when the stream ends, fails or `stop` fires
  // (promptly: the transfer wakes on the stop request).
  virtual WatchResult Watch(std::string_view path, const WatchOptions& options,
                            const WatchCallback& callback, std::stop_token stop = {}) = 0;

  // coordination.k8s.io/v1 Leases. UpdateLease PUTs `lease` as is: it must
  // carry the resourceVersion that was read, and a stale one answers
  // IsConflict(). `timeout` (0: the client's default) lets the elector bound a
  // call by its renew deadline.
  virtual ApiResult GetLease(std::string_view ns, std::string_view name,
                             std::chrono::milliseconds timeout = {}) = 0;
  virtual ApiResult CreateLease(std::string_view ns, const nlohmann::json& lease,
                                std::chrono::milliseconds timeout = {}) = 0;
  virtual ApiResult UpdateLease(std::string_view ns, std::string_view name,
                                const nlohmann::json& lease,
                                std::chrono::milliseconds timeout = {}) = 0;
};

}  // namespace kwd::kube
