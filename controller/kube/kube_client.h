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
#include "controller/kube/kube_api.h"
#include "controller/kube/kube_config.h"

namespace kwd::kube {

struct ClientOptions {
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds connect_timeout{5000};
  int page_size = 500;
  int max_list_restarts = 3;
  int max_throttle_retries = 3;              // 429 answers retried after Retry-After
  std::chrono::seconds max_retry_after{30};  // cap on a server's Retry-After
  std::chrono::nanoseconds token_refresh_interval = std::chrono::minutes(1);
  // kubeconfig exec plugins: run again this long before the credential's
  // expirationTimestamp (at half its lifetime when that is shorter); a plugin
  // that has not finished after exec_timeout is killed.
  std::chrono::nanoseconds exec_refresh_margin = std::chrono::seconds(30);
  std::chrono::milliseconds exec_timeout{30000};
  std::string user_agent = "kwd-controller";
  std::shared_ptr<const Clock> clock;  // default: RealClock
  std::shared_ptr<Sleeper> sleeper;    // waits for Retry-After; default: RealSleeper
};

// A small Kubernetes API client on libcurl. Thread-safe: each call borrows a
// connection from a pool, so watches on several threads and writes from
// another proceed in parallel. Paths are API paths such as
// "/apis/dispatch.kwd.io/v1alpha1/namespaces/erp/logongroups".
class KubeClient final : public KubeApi {
 public:
  explicit KubeClient(KubeConfig config, ClientOptions options = {});
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  const KubeConfig& config() const { return config_; }

  ApiResult Get(std::string_view path) override;
  ApiResult Post(std::string_view path, const nlohmann::json& body) override;
  ApiResult Put(std::string_view path, const nlohmann::json& body) override;
  ApiResult Patch(std::string_view path, const nlohmann::json& body,
                  std::string_view content_type) override;
  ApiResult Delete(std::string_view path) override;
  ApiResult MergePatchStatus(std::string_view object_path, const nlohmann::json& patch) override;
  ListResult List(std::string_view path, std::string_view label_selector = {},
                  std::stop_token stop = {}) override;
  WatchResult Watch(std::string_view path, const WatchOptions& options,
                    const WatchCallback& callback, std::stop_token stop = {}) override;
  ApiResult GetLease(std::string_view ns, std::string_view name,
                     std::chrono::milliseconds timeout = {}) override;
  ApiResult CreateLease(std::string_view ns, const nlohmann::json& lease,
                        std::chrono::milliseconds timeout = {}) override;
  ApiResult UpdateLease(std::string_view ns, std::string_view name, const nlohmann::json& lease,
                        std::chrono::milliseconds timeout = {}) override;

  // Internal to kube_client.cc (named here for its C callbacks).
  struct Session;
  struct Transfer;

 private:
  std::unique_ptr<Session> Borrow();
  void Return(std::unique_ptr<Session> session);
  // Runs one request with the 401 re-read (token file) or re-run (exec
  // plugin) and 429 retry policies.
  void Execute(Transfer& transfer);
  ApiResult Simple(const char* method, std::string_view path, const nlohmann::json* body,
                   std::string_view content_type, std::chrono::milliseconds timeout = {});

  const KubeConfig config_;
  const ClientOptions options_;
  std::shared_ptr<const Clock> clock_;
  std::shared_ptr<Sleeper> sleeper_;
  TokenSource tokens_;
  std::unique_ptr<ExecCredentialSource> exec_;  // set when the kubeconfig user has `exec`
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<Session>> idle_sessions_;
};

// Percent-encodes a query parameter value.
std::string EscapeQueryValue(std::string_view value);

}  // namespace kwd::kube
