// `kwd-controller ensure-affinity-key`: creates the proxies' affinity-cookie
// key Secret once, with a random key, and never changes an existing one. The
// chart runs it as a pre-install/pre-upgrade hook Job, so that rendering the
// chart (`helm template`, Argo CD, Flux) never generates a key: every render
// is the same, and the key survives upgrades and re-syncs.

#include <openssl/rand.h>

#include <ostream>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "controller/cli/cli.h"
#include "controller/kube/kube_client.h"
#include "controller/kube/kube_config.h"

namespace kwd::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: kwd-controller ensure-affinity-key --namespace NS --secret NAME [--key KEY]\n"
    "                                          [--kubeconfig FILE]\n"
    "\n"
    "Creates Secret NS/NAME with a random affinity-cookie key under KEY (default\n"
    "affinity.key) unless the Secret exists; an existing Secret is never changed.\n"
    "Needs get and create on secrets. Exit 0 when the Secret holds the key, 1 when\n"
    "the API refuses or the Secret exists without KEY, 2 on a usage error.\n";

}  // namespace

int RunEnsureAffinityKey(const std::vector<std::string>& args, std::ostream& out,
                         std::ostream& err) {
  std::string ns;
  std::string secret;
  std::string key = "affinity.key";
  std::string kubeconfig;
  auto usage_error = [&](const std::string& message) {
    err << "kwd-controller ensure-affinity-key: " << message << "\n"
        << "Run 'kwd-controller ensure-affinity-key --help' for usage.\n";
    return 2;
  };
  std::vector<FlagValue> flags;
  std::string flag_error;
  if (!SplitFlags(args, &flags, &flag_error)) {
    return usage_error(flag_error);
  }
  for (const auto& [name, value] : flags) {
    if (name == "--help") {
      out << kUsage;
      return 0;
    }
    if (name == "--namespace") {
      ns = value;
    } else if (name == "--secret") {
      secret = value;
    } else if (name == "--key") {
      key = value;
    } else if (name == "--kubeconfig") {
      kubeconfig = value;
    } else {
      return usage_error("unknown flag " + name);
    }
  }
  if (ns.empty() || secret.empty() || key.empty()) {
    return usage_error("--namespace, --secret and --key need values");
  }
  kube::KubeConfigSource source;
  source.kubeconfig_path = kubeconfig;
  kube::KubeConfig config;
  std::string error;
  if (!kube::LoadKubeConfig(source, &config, &error)) {
    err << "kwd-controller ensure-affinity-key: " << error << "\n";
    return 1;
  }
  kube::KubeClient client(config);
  std::string path = "/api/v1/namespaces/" + ns + "/secrets";
  kube::ApiResult existing = client.Get(path + "/" + secret);
  if (existing.status.ok()) {
    if (existing.body.contains("data") && existing.body["data"].contains(key)) {
      out << "Secret " << ns << "/" << secret << " exists: key " << key << " kept\n";
      return 0;
    }
    err << "kwd-controller ensure-affinity-key: Secret " << ns << "/" << secret
        << " exists without key " << key << "; add it or delete the Secret\n";
    return 1;
  }
  if (!existing.status.IsNotFound()) {
    err << "kwd-controller ensure-affinity-key: get Secret " << ns << "/" << secret << ": "
        << existing.status.ToString() << "\n";
    return 1;
  }
  unsigned char random[32];
  if (RAND_bytes(random, sizeof random) != 1) {
    err << "kwd-controller ensure-affinity-key: no random bytes\n";
    return 1;
  }
  std::string value =
      Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(random), sizeof random));
  nlohmann::json body = {
      {"apiVersion", "v1"},
      {"kind", "Secret"},
      {"type", "Opaque"},
      {"metadata",
       {{"name", secret},
        {"namespace", ns},
        {"labels", {{"app.kubernetes.io/part-of", "kwd"}, {"app.kubernetes.io/managed-by", "kwd"}}},
        {"annotations",
         {{"dispatch.kwd.io/description",
           "affinity-cookie signing key of the kwd proxies; created once by kwd-controller "
           "ensure-affinity-key, never rotated by it"}}}}},
      {"stringData", {{key, value}}}};
  kube::ApiResult created = client.Post(path, body);
  if (created.status.ok()) {
    out << "Secret " << ns << "/" << secret << " created with a random key " << key << "\n";
    return 0;
  }
  if (created.status.IsConflict()) {  // another run created it first
    out << "Secret " << ns << "/" << secret << " exists: key " << key << " kept\n";
    return 0;
  }
  err << "kwd-controller ensure-affinity-key: create Secret " << ns << "/" << secret << ": "
      << created.status.ToString() << "\n";
  return 1;
}

}  // namespace kwd::cli
