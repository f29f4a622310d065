#include "controller/kube/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/crypto.h"

namespace kwd::kube {
namespace {

bool ReadFile(const std::string& path, std::string* contents) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return false;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *contents = buffer.str();
  return true;
}

std::string Trim(std::string text) {
  const char* blanks = " \t\r\n";
  text.erase(text.find_last_not_of(blanks) + 1);
  text.erase(0, text.find_first_not_of(blanks));
  return text;
}

std::string ResolvePath(std::string_view base_dir, const std::string& path) {
  if (path.empty() || path.front() == '/' || base_dir.empty()) {
    return path;
  }
  return std::string(base_dir) + "/" + path;
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool DecodeBase64Field(const std::string& encoded, std::string* decoded) {
  std::string compact;
  for (char c : encoded) {
    if (c != '\n' && c != '\r' && c != ' ') {
      compact.push_back(c);
    }
  }
  std::vector<char> buffer(compact.size() + 1);
  int size = Base64Decode(compact, buffer.data(), buffer.size());
  if (size < 0) {
    return false;
  }
  decoded->assign(buffer.data(), static_cast<size_t>(size));
  return true;
}

// Finds `name` in a kubeconfig list such as clusters: [{name:, cluster: {...}}].
YAML::Node FindNamed(const YAML::Node& list, const std::string& name, const char* field) {
  if (list && list.IsSequence()) {
    for (const auto& entry : list) {
      if (entry["name"] && entry["name"].as<std::string>() == name) {
        return entry[field];
      }
    }
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string StringField(const YAML::Node& node, const char* field) {
  if (node && node[field] && node[field].IsScalar()) {
    return node[field].as<std::string>();
  }
  return {};
}

// Reads a PEM from `<field>-data` (Base64) or from the file `<field>`.
bool PemField(const YAML::Node& node, const std::string& field, std::string_view base_dir,
              std::string* pem, std::string* error) {
  std::string data = StringField(node, (field + "-data").c_str());
  if (!data.empty()) {
    if (!DecodeBase64Field(data, pem)) {
      *error = field + "-data is not Base64";
      return false;
    }
    return true;
  }
  std::string file = StringField(node, field.c_str());
  if (!file.empty() && !ReadFile(ResolvePath(base_dir, file), pem)) {
    *error = "cannot read " + field + " file " + ResolvePath(base_dir, file);
    return false;
  }
  return true;
}

std::optional<std::string> LookupEnv(const KubeConfigSource& source, const char* name) {
  if (source.getenv) {
    return source.getenv(name);
  }
  const char* value = std::getenv(name);
  if (value == nullptr) {
    return std::nullopt;
  }
  return std::string(value);
}

}  // namespace

bool ParseKubeConfig(std::string_view yaml, std::string_view base_dir, std::string_view context,
                     KubeConfig* config, std::string* error) {
  // yaml-cpp reports malformed input by throwing; keep that inside.
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    if (!root || !root.IsMap()) {
      *error = "kubeconfig is not a YAML map";
      return false;
    }
    std::string context_name =
        context.empty() ? StringField(root, "current-context") : std::string(context);
    if (context_name.empty()) {
      *error = "kubeconfig has no current-context";
      return false;
    }
    YAML::Node context_node = FindNamed(root["contexts"], context_name, "context");
    if (!context_node) {
      *error = "context \"" + context_name + "\" not found in kubeconfig";
      return false;
    }
    std::string cluster_name = StringField(context_node, "cluster");
    YAML::Node cluster = FindNamed(root["clusters"], cluster_name, "cluster");
    if (!cluster) {
      *error = "cluster \"" + cluster_name + "\" not found in kubeconfig";
      return false;
    }
    KubeConfig result;
    result.default_namespace = StringField(context_node, "namespace");
    result.server = StringField(cluster, "server");
    if (result.server.empty()) {
      *error = "cluster \"" + cluster_name + "\" has no server";
      return false;
    }
    while (!result.server.empty() && result.server.back() == '/') {
      result.server.pop_back();
    }
    if (cluster["insecure-skip-tls-verify"]) {
      result.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"].as<bool>();
    }
    if (!PemField(cluster, "certificate-authority", base_dir, &result.ca_pem, error)) {
      return false;
    }
    std::string user_name = StringField(context_node, "user");
    if (!user_name.empty()) {
      YAML::Node user = FindNamed(root["users"], user_name, "user");
      if (!user) {
        *error = "user \"" + user_name + "\" not found in kubeconfig";
        return false;
      }
      result.token = StringField(user, "token");
      std::string token_file = StringField(user, "tokenFile");
      if (!token_file.empty()) {
        result.token_file = ResolvePath(base_dir, token_file);
      }
      if (!PemField(user, "client-certificate", base_dir, &result.client_cert_pem, error) ||
          !PemField(user, "client-key", base_dir, &result.client_key_pem, error)) {
        return false;
      }
      if (result.client_cert_pem.empty() != result.client_key_pem.empty()) {
        *error = "user \"" + user_name + "\" needs both a client certificate and a key";
        return false;
      }
    }
    *config = std::move(result);
    return true;
  } catch (const YAML::Exception& e) {
    *error = std::string("kubeconfig: ") + e.what();
    return false;
  }
}

bool LoadInClusterConfig(const KubeConfigSource& source, KubeConfig* config, std::string* error) {
  std::optional<std::string> host = LookupEnv(source, "KUBERNETES_SERVICE_HOST");
  std::optional<std::string> port = LookupEnv(source, "KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    *error =
        "no kubeconfig and not in a cluster (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT "
        "unset)";
    return false;
  }
  KubeConfig result;
  bool ipv6 = host->find(':') != std::string::npos;
  result.server = "https://" + (ipv6 ? "[" + *host + "]" : *host) + ":" + *port;
  const std::string& dir = source.service_account_dir;
  result.token_file = dir + "/token";
  std::string token;
  if (!ReadFile(result.token_file, &token)) {
    *error = "cannot read service account token " + result.token_file;
    return false;
  }
  if (!ReadFile(dir + "/ca.crt", &result.ca_pem)) {
    *error = "cannot read service account CA " + dir + "/ca.crt";
    return false;
  }
  std::string ns;
  if (ReadFile(dir + "/namespace", &ns)) {
    result.default_namespace = Trim(ns);
  }
  *config = std::move(result);
  return true;
}

bool LoadKubeConfig(const KubeConfigSource& source, KubeConfig* config, std::string* error) {
  std::string path = source.kubeconfig_path;
  if (path.empty()) {
    std::optional<std::string> env = LookupEnv(source, "KUBECONFIG");
    if (env) {
      std::stringstream list(*env);
      std::string candidate;
      while (std::getline(list, candidate, ':')) {
        std::ifstream probe(candidate);
        if (!candidate.empty() && probe) {
          path = candidate;
          break;
        }
      }
    }
  }
  if (path.empty()) {
    return LoadInClusterConfig(source, config, error);
  }
  std::string yaml;
  if (!ReadFile(path, &yaml)) {
    *error = "cannot read kubeconfig " + path;
    return false;
  }
  return ParseKubeConfig(yaml, DirName(path), source.context, config, error);
}

TokenSource::TokenSource(std::string static_token, std::string token_file, const Clock& clock,
                         std::chrono::nanoseconds refresh_interval)
    : static_token_(std::move(static_token)),
      token_file_(std::move(token_file)),
      clock_(clock),
      refresh_interval_(refresh_interval) {}

std::string TokenSource::Token() {
  if (token_file_.empty()) {
    return static_token_;
  }
  std::lock_guard lock(mutex_);
  auto now = clock_.Now();
  if (!read_at_ || now - *read_at_ >= refresh_interval_) {
    std::string contents;
    // Keep the last good token when the file is briefly missing mid-rotation.
    if (ReadFile(token_file_, &contents)) {
      cached_ = Trim(std::move(contents));
    }
    read_at_ = now;
  }
  return cached_;
}

void TokenSource::Invalidate() {
  std::lock_guard lock(mutex_);
  read_at_.reset();
}

}  // namespace kwd::kube
