#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/kube/clock.h"

namespace kwd::kube {

inline constexpr std::string_view kDefaultServiceAccountDir =
    "/var/run/secrets/kubernetes.io/serviceaccount";

// A kubeconfig user's `exec` credential plugin, run as client-go runs it
// (client.authentication.k8s.io/v1 or v1beta1 ExecCredential). kwd never has
// a terminal: interactiveMode Never and IfAvailable run the plugin with stdin
// on /dev/null and spec.interactive=false; Always is refused at load time.
struct ExecConfig {
  std::string user;     // the kubeconfig user entry, named by every error
  std::string command;  // a path (resolved against the kubeconfig) or a name looked up on PATH
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // added to kwd's own environment
  std::string api_version;  // client.authentication.k8s.io/v1 or /v1beta1
  std::string install_hint;
  // spec.cluster of the request (provideClusterInfo: true); null otherwise.
  nlohmann::json cluster_info;
};

// Where and how to reach the API server. Certificates are held as PEM blobs
// (files named by a kubeconfig are read at load time); a token file is kept
// as a path because projected service-account tokens rotate.
struct KubeConfig {
  std::string server;             // e.g. "https://10.96.0.1:443"
  std::string default_namespace;  // context namespace or the service account's; may be empty
  std::string ca_pem;             // empty: the system trust store
  bool insecure_skip_tls_verify = false;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string token;               // static bearer token
  std::string token_file;          // bearer token re-read from this file
  std::optional<ExecConfig> exec;  // credentials from a plugin (alone: never with the above)
};

struct KubeConfigSource {
  std::string kubeconfig_path;  // --kubeconfig; empty: $KUBECONFIG, else in-cluster
  std::string context;          // empty: the kubeconfig's current-context
  std::string service_account_dir = std::string(kDefaultServiceAccountDir);
  // Environment lookup (KUBECONFIG, KUBERNETES_SERVICE_HOST/PORT); tests inject one.
  std::function<std::optional<std::string>(const char* name)> getenv;
};

// --kubeconfig, else the first file of $KUBECONFIG (a colon-separated list;
// unlike kubectl the files are not merged), else the in-cluster service account.
bool LoadKubeConfig(const KubeConfigSource& source, KubeConfig* config, std::string* error);

// Parses kubeconfig YAML. Relative file names resolve against base_dir.
bool ParseKubeConfig(std::string_view yaml, std::string_view base_dir, std::string_view context,
                     KubeConfig* config, std::string* error);

bool LoadInClusterConfig(const KubeConfigSource& source, KubeConfig* config, std::string* error);

// The bearer token for each request: a static token, or a file that is
// re-read at most every `refresh_interval`, or at once after Invalidate()
// (the client calls it on 401 before retrying once). Thread-safe.
class TokenSource {
 public:
  TokenSource(std::string static_token, std::string token_file, const Clock& clock,
              std::chrono::nanoseconds refresh_interval = std::chrono::minutes(1));

  std::string Token();
  void Invalidate();
  bool FromFile() const { return !token_file_.empty(); }

 private:
  const std::string static_token_;
  const std::string token_file_;
  const Clock& clock_;
  const std::chrono::nanoseconds refresh_interval_;
  std::mutex mutex_;
  std::string cached_;
  std::optional<std::chrono::steady_clock::time_point> read_at_;
};

// What an exec plugin returned.
struct ExecCredential {
  std::string token;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::optional<std::chrono::system_clock::time_point> expiry;  // none: valid until a 401
  uint64_t generation = 0;  // counts plugin runs that produced a credential
};

// Runs the plugin once. Errors start with `user "NAME": exec plugin` and say
// what went wrong (not found on PATH with the install hint, exit status and
// the start of stderr, a timeout, output that is not an ExecCredential of the
// configured apiVersion).
bool RunExecPlugin(const ExecConfig& exec, std::chrono::milliseconds timeout,
                   ExecCredential* credential, std::string* error);

// Parses RFC 3339 ("2026-12-01T10:00:00Z", fractions and +hh:mm offsets too).
std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view text);

// The credential of an exec plugin, cached like client-go caches it: until
// its expirationTimestamp (refreshed `refresh_margin` before it, or at half
// its lifetime when that is shorter), or without one until a 401 makes the
// client call Invalidate. One plugin run at a time; a failure is answered
// for kFailureHold without running the plugin again. Thread-safe.
class ExecCredentialSource {
 public:
  ExecCredentialSource(ExecConfig exec, const Clock& clock,
                       std::chrono::nanoseconds refresh_margin = std::chrono::seconds(30),
                       std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // The cached credential or a fresh one. When a refresh fails while the
  // cached credential has not expired yet (and was not refused), that one is
  // returned.
  bool Get(ExecCredential* credential, std::string* error);
  // The server refused the credential of `generation`: the next Get runs the
  // plugin, unless the credential was replaced meanwhile.
  void Invalidate(uint64_t generation);

  static constexpr std::chrono::seconds kFailureHold{1};

 private:
  const ExecConfig exec_;
  const Clock& clock_;
  const std::chrono::nanoseconds refresh_margin_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::optional<ExecCredential> cached_;
  std::chrono::system_clock::time_point refresh_at_;
  bool refused_ = false;
  uint64_t runs_ = 0;
  std::optional<std::chrono::steady_clock::time_point> failed_at_;
  std::string last_error_;
};

}  // namespace kwd::kube
