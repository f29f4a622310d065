#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "controller/kube/clock.h"

namespace kwd::kube {

inline constexpr std::string_view kDefaultServiceAccountDir =
    "/var/run/secrets/kubernetes.io/serviceaccount";

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
  std::string token;       // static bearer token
  std::string token_file;  // bearer token re-read from this file
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

}  // namespace kwd::kube
