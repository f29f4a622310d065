#include "controller/kube/kube_config.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "controller/kube/leader_elector.h"

extern char** environ;

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

// A token goes into "Authorization: Bearer <token>": no spaces or control
// characters (header injection).
bool IsHeaderSafe(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f;
  });
}

std::string ResolvePath(std::string_view base_dir, const std::string& path) {
  if (path.empty() || path.front() == '/' || base_dir.empty() || base_dir == ".") {
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

std::string Quoted(const std::string& text) {
  return "\"" + text + "\"";
}

// Refuses fields kwd does not know: a kubeconfig form it cannot honour must
// not be ignored silently.
bool CheckKnownFields(const YAML::Node& node, std::initializer_list<std::string_view> known,
                      const std::string& where, std::string* error) {
  if (!node || node.IsNull()) {
    return true;
  }
  if (!node.IsMap()) {
    *error = where + " is not a map";
    return false;
  }
  for (const auto& field : node) {
    std::string key = field.first.as<std::string>();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      *error = where + ": unknown field " + Quoted(key);
      return false;
    }
  }
  return true;
}

// `field` as a string; absent or null gives "". A list or map is an error.
bool StringValue(const YAML::Node& node, const char* field, const std::string& where,
                 std::string* value, std::string* error) {
  value->clear();
  if (!node || !node.IsMap() || !node[field] || node[field].IsNull()) {
    return true;
  }
  if (!node[field].IsScalar()) {
    *error = where + ": " + field + " must be a string";
    return false;
  }
  *value = node[field].as<std::string>();
  return true;
}

bool BoolValue(const YAML::Node& node, const char* field, const std::string& where, bool* value,
               std::string* error) {
  if (!node || !node.IsMap() || !node[field] || node[field].IsNull()) {
    return true;
  }
  if (!node[field].IsScalar() || !YAML::convert<bool>::decode(node[field], *value)) {
    *error = where + ": " + field + " must be true or false";
    return false;
  }
  return true;
}

// A YAML value as JSON (cluster extensions are handed to exec plugins).
nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& item : node) {
        list.push_back(YamlToJson(item));
      }
      return list;
    }
    case YAML::NodeType::Map: {
      nlohmann::json map = nlohmann::json::object();
      for (const auto& field : node) {
        map[field.first.as<std::string>()] = YamlToJson(field.second);
      }
      return map;
    }
    case YAML::NodeType::Scalar: {
      if (node.Tag() == "!") {
        return node.Scalar();  // quoted: a string whatever it looks like
      }
      int64_t integer;
      double number;
      bool flag;
      if (YAML::convert<int64_t>::decode(node, integer)) {
        return integer;
      }
      if (YAML::convert<double>::decode(node, number) && std::isfinite(number)) {
        return number;
      }
      if (YAML::convert<bool>::decode(node, flag)) {
        return flag;
      }
      if (node.Scalar() == "~" || node.Scalar() == "null") {
        return nullptr;
      }
      return node.Scalar();
    }
    default:
      return nullptr;
  }
}

std::string Base64Encode(std::string_view data) {
  std::string text = Base64UrlEncode(data);
  for (char& c : text) {
    c = c == '-' ? '+' : c == '_' ? '/' : c;
  }
  text.append((4 - text.size() % 4) % 4, '=');
  return text;
}

constexpr std::string_view kExecV1 = "client.authentication.k8s.io/v1";
constexpr std::string_view kExecV1beta1 = "client.authentication.k8s.io/v1beta1";
constexpr std::string_view kExecExtension = "client.authentication.k8s.io/exec";

bool ParseExec(const YAML::Node& node, const std::string& user_where, std::string_view base_dir,
               ExecConfig* exec, std::string* error) {
  const std::string where = user_where + ": exec";
  if (!CheckKnownFields(node,
                        {"apiVersion", "command", "args", "env", "interactiveMode",
                         "provideClusterInfo", "installHint"},
                        where, error)) {
    return false;
  }
  if (!StringValue(node, "command", where, &exec->command, error) ||
      !StringValue(node, "apiVersion", where, &exec->api_version, error) ||
      !StringValue(node, "installHint", where, &exec->install_hint, error)) {
    return false;
  }
  if (exec->command.empty()) {
    *error = where + " needs a command";
    return false;
  }
  // client-go resolves a command holding a slash against the kubeconfig's
  // directory and looks a bare name up on PATH.
  if (exec->command.find('/') != std::string::npos) {
    exec->command = ResolvePath(base_dir, exec->command);
  }
  if (exec->api_version.empty()) {
    *error = where + " needs an apiVersion (" + std::string(kExecV1) + ")";
    return false;
  }
  if (exec->api_version != kExecV1 && exec->api_version != kExecV1beta1) {
    *error = where + " apiVersion " + Quoted(exec->api_version) + " is not supported (use " +
             std::string(kExecV1) + " or " + std::string(kExecV1beta1) + ")";
    return false;
  }
  std::string mode;
  if (!StringValue(node, "interactiveMode", where, &mode, error)) {
    return false;
  }
  if (mode.empty() && exec->api_version == kExecV1) {
    *error = where + " interactiveMode must be set for " + std::string(kExecV1) +
             " (Never: kwd runs plugins without a terminal)";
    return false;
  }
  if (mode == "Always") {
    *error = where +
             " interactiveMode Always needs a terminal; kwd runs plugins without one (use Never)";
    return false;
  }
  if (!mode.empty() && mode != "Never" && mode != "IfAvailable") {
    *error =
        where + " interactiveMode " + Quoted(mode) + " is not one of Never, IfAvailable, Always";
    return false;
  }
  if (const YAML::Node args = node["args"]; args && !args.IsNull()) {
    if (!args.IsSequence()) {
      *error = where + ": args must be a list of strings";
      return false;
    }
    for (const auto& arg : args) {
      if (!arg.IsScalar()) {
        *error = where + ": args must be a list of strings";
        return false;
      }
      exec->args.push_back(arg.as<std::string>());
    }
  }
  if (const YAML::Node env = node["env"]; env && !env.IsNull()) {
    if (!env.IsSequence()) {
      *error = where + ": env must be a list of {name, value}";
      return false;
    }
    for (const auto& entry : env) {
      std::string name;
      std::string value;
      if (!CheckKnownFields(entry, {"name", "value"}, where + " env entry", error) ||
          !StringValue(entry, "name", where, &name, error) ||
          !StringValue(entry, "value", where, &value, error)) {
        return false;
      }
      if (name.empty() || name.find('=') != std::string::npos) {
        *error = where + " env entry needs a name (without '=')";
        return false;
      }
      exec->env.emplace_back(std::move(name), std::move(value));
    }
  }
  return true;
}

// spec.cluster of the ExecCredential request: what the kubeconfig says about
// the cluster, the CA always as data, the exec extension as `config`.
nlohmann::json ExecClusterInfo(const YAML::Node& cluster, const KubeConfig& config,
                               bool disable_compression) {
  nlohmann::json info = {{"server", config.server}};
  if (config.insecure_skip_tls_verify) {
    info["insecure-skip-tls-verify"] = true;
  }
  if (!config.ca_pem.empty()) {
    info["certificate-authority-data"] = Base64Encode(config.ca_pem);
  }
  if (disable_compression) {
    info["disable-compression"] = true;
  }
  if (const YAML::Node extensions = cluster["extensions"]; extensions && extensions.IsSequence()) {
    for (const auto& extension : extensions) {
      if (extension.IsMap() && extension["name"] && extension["name"].IsScalar() &&
          extension["name"].as<std::string>() == kExecExtension && extension["extension"]) {
        info["config"] = YamlToJson(extension["extension"]);
      }
    }
  }
  return info;
}

bool ParseUser(const YAML::Node& user, const std::string& user_name, std::string_view base_dir,
               KubeConfig* config, std::string* error) {
  const std::string where = "user " + Quoted(user_name);
  if (!user || user.IsNull()) {
    return true;
  }
  if (!user.IsMap()) {
    *error = where + " is not a map";
    return false;
  }
  if (const YAML::Node provider = user["auth-provider"]; provider) {
    std::string name;
    StringValue(provider, "name", where, &name, error);
    *error = where + ": auth-provider " + Quoted(name) +
             " is not supported (client-go dropped these providers; use an exec plugin such as "
             "gke-gcloud-auth-plugin or kubelogin)";
    return false;
  }
  if (user["username"] || user["password"]) {
    *error = where +
             ": basic authentication (username/password) is not supported; use a token, a "
             "client certificate or an exec plugin";
    return false;
  }
  for (const char* field : {"as", "as-uid", "as-groups", "as-user-extra"}) {
    if (user[field]) {
      *error = where + ": impersonation (" + field + ") is not supported";
      return false;
    }
  }
  if (!CheckKnownFields(user,
                        {"token", "tokenFile", "client-certificate", "client-certificate-data",
                         "client-key", "client-key-data", "exec", "extensions"},
                        where, error)) {
    return false;
  }
  std::string token_file;
  if (!StringValue(user, "token", where, &config->token, error) ||
      !StringValue(user, "tokenFile", where, &token_file, error)) {
    return false;
  }
  if (!IsHeaderSafe(config->token)) {
    *error = where + ": token has spaces or control characters";
    return false;
  }
  if (!token_file.empty()) {
    config->token_file = ResolvePath(base_dir, token_file);
    std::string contents;
    if (!ReadFile(config->token_file, &contents)) {
      *error = where + ": cannot read tokenFile " + config->token_file;
      return false;
    }
    if (!IsHeaderSafe(Trim(std::move(contents)))) {
      *error = where + ": tokenFile " + config->token_file +
               " holds a token with spaces or control characters";
      return false;
    }
  }
  if (!PemField(user, "client-certificate", base_dir, &config->client_cert_pem, error) ||
      !PemField(user, "client-key", base_dir, &config->client_key_pem, error)) {
    *error = where + ": " + *error;
    return false;
  }
  if (config->client_cert_pem.empty() != config->client_key_pem.empty()) {
    *error = where + " needs both a client certificate and a key";
    return false;
  }
  if (const YAML::Node exec = user["exec"]; exec && !exec.IsNull()) {
    if (!config->token.empty() || !config->token_file.empty() || !config->client_cert_pem.empty()) {
      *error = where +
               ": exec cannot be combined with token, tokenFile or a client certificate "
               "(client-go would not run the plugin)";
      return false;
    }
    ExecConfig parsed;
    parsed.user = user_name;
    if (!ParseExec(exec, where, base_dir, &parsed, error)) {
      return false;
    }
    config->exec = std::move(parsed);
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
    const std::string context_where = "context " + Quoted(context_name);
    KubeConfig result;
    std::string cluster_name;
    std::string user_name;
    if (!CheckKnownFields(context_node, {"cluster", "user", "namespace", "extensions"},
                          context_where, error) ||
        !StringValue(context_node, "cluster", context_where, &cluster_name, error) ||
        !StringValue(context_node, "user", context_where, &user_name, error) ||
        !StringValue(context_node, "namespace", context_where, &result.default_namespace, error)) {
      return false;
    }
    YAML::Node cluster = FindNamed(root["clusters"], cluster_name, "cluster");
    if (!cluster) {
      *error = "cluster \"" + cluster_name + "\" not found in kubeconfig";
      return false;
    }
    const std::string cluster_where = "cluster " + Quoted(cluster_name);
    bool disable_compression = false;
    if (cluster["proxy-url"]) {
      *error = cluster_where +
               ": proxy-url is not supported (libcurl honours the HTTPS_PROXY environment "
               "variable instead)";
      return false;
    }
    if (cluster["tls-server-name"]) {
      *error = cluster_where + ": tls-server-name is not supported";
      return false;
    }
    if (!CheckKnownFields(cluster,
                          {"server", "certificate-authority", "certificate-authority-data",
                           "insecure-skip-tls-verify", "disable-compression", "extensions"},
                          cluster_where, error) ||
        !StringValue(cluster, "server", cluster_where, &result.server, error) ||
        !BoolValue(cluster, "insecure-skip-tls-verify", cluster_where,
                   &result.insecure_skip_tls_verify, error) ||
        // kwd never asks for compressed answers: disable-compression holds either way.
        !BoolValue(cluster, "disable-compression", cluster_where, &disable_compression, error)) {
      return false;
    }
    if (result.server.empty()) {
      *error = "cluster \"" + cluster_name + "\" has no server";
      return false;
    }
    while (!result.server.empty() && result.server.back() == '/') {
      result.server.pop_back();
    }
    if (!PemField(cluster, "certificate-authority", base_dir, &result.ca_pem, error)) {
      *error = cluster_where + ": " + *error;
      return false;
    }
    if (!user_name.empty()) {
      YAML::Node user = FindNamed(root["users"], user_name, "user");
      if (!user) {
        *error = "user \"" + user_name + "\" not found in kubeconfig";
        return false;
      }
      if (!ParseUser(user, user_name, base_dir, &result, error)) {
        return false;
      }
      // provideClusterInfo: read here, where the cluster is at hand.
      bool provide_cluster_info = false;
      if (result.exec &&
          !BoolValue(user["exec"], "provideClusterInfo", "user " + Quoted(user_name) + ": exec",
                     &provide_cluster_info, error)) {
        return false;
      }
      if (provide_cluster_info) {
        result.exec->cluster_info = ExecClusterInfo(cluster, result, disable_compression);
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
  if (!IsHeaderSafe(Trim(std::move(token)))) {
    *error = "service account token " + result.token_file + " has spaces or control characters";
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
    // Keep the last good token when the file is briefly missing mid-rotation,
    // or holds what cannot go into a header.
    if (ReadFile(token_file_, &contents)) {
      if (std::string token = Trim(std::move(contents)); IsHeaderSafe(token)) {
        cached_ = std::move(token);
      }
    }
    read_at_ = now;
  }
  return cached_;
}

void TokenSource::Invalidate() {
  std::lock_guard lock(mutex_);
  read_at_.reset();
}

namespace {

constexpr size_t kMaxPluginOutput = 1 << 20;  // an ExecCredential is a few KiB
constexpr size_t kMaxPluginStderr = 512;      // quoted in errors

struct ChildRun {
  int spawn_errno = 0;
  bool timed_out = false;
  bool output_too_large = false;
  int wait_status = 0;
  std::string out;
  std::string err;
};

// Runs argv[0] (looked up on PATH when it has no slash) with `env`, stdin on
// /dev/null, in a process group of its own so a timeout kills what it started.
ChildRun RunChild(const std::vector<std::string>& argv_strings,
                  const std::vector<std::string>& env_strings, std::chrono::milliseconds timeout) {
  ChildRun run;
  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    run.spawn_errno = errno;
    return run;
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    run.spawn_errno = errno;
    close(out[0]);
    close(out[1]);
    return run;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);
  sigset_t signals;
  sigemptyset(&signals);
  posix_spawnattr_setsigmask(&attributes, &signals);
  for (int signal : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2}) {
    sigaddset(&signals, signal);
  }
  posix_spawnattr_setsigdefault(&attributes, &signals);
  std::vector<char*> argv;
  for (const std::string& arg : argv_strings) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& entry : env_strings) {
    envp.push_back(const_cast<char*>(entry.c_str()));
  }
  envp.push_back(nullptr);
  pid_t pid = -1;
  run.spawn_errno = posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  close(out[1]);
  close(err[1]);
  if (run.spawn_errno != 0) {
    close(out[0]);
    close(err[0]);
    return run;
  }

  auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buffer[8192];
  while (open_fds > 0 && !run.output_too_large) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      run.timed_out = true;
      break;
    }
    int ready = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
    if (ready < 0 && errno != EINTR) {
      break;
    }
    if (ready <= 0) {
      continue;  // revents are not fresh: a read could block
    }
    for (pollfd& fd : fds) {
      if (fd.fd < 0 || (fd.revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        continue;
      }
      ssize_t n = read(fd.fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        close(fd.fd);
        fd.fd = -1;
        --open_fds;
        continue;
      }
      if (fd.fd == out[0]) {
        run.out.append(buffer, static_cast<size_t>(n));
        run.output_too_large = run.out.size() > kMaxPluginOutput;
      } else if (run.err.size() < kMaxPluginStderr) {
        run.err.append(buffer, std::min(static_cast<size_t>(n), kMaxPluginStderr - run.err.size()));
      }
    }
  }
  for (pollfd& fd : fds) {
    if (fd.fd >= 0) {
      close(fd.fd);
    }
  }
  // The pipes are closed; the plugin normally exits now. Wait until the deadline.
  while (!run.timed_out && !run.output_too_large) {
    pid_t done = waitpid(pid, &run.wait_status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) {
      return run;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      run.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(-pid, SIGKILL);
  while (waitpid(pid, &run.wait_status, 0) < 0 && errno == EINTR) {
  }
  return run;
}

// The start of a plugin's stderr, on one line, for an error message.
std::string StderrExcerpt(const std::string& text) {
  std::string line;
  for (char c : text) {
    line.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c);
  }
  line = Trim(std::move(line));
  return line.empty() ? "" : ": " + line;
}

std::string FormatDuration(std::chrono::milliseconds duration) {
  if (duration.count() % 1000 == 0) {
    return std::to_string(duration.count() / 1000) + "s";
  }
  return std::to_string(duration.count()) + "ms";
}

// kwd's environment, then the entry's env list, then KUBERNETES_EXEC_INFO; a
// later value of a name replaces an earlier one.
std::vector<std::string> PluginEnvironment(const ExecConfig& exec, const std::string& exec_info) {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  auto set = [&env](const std::string& name, const std::string& value) {
    std::erase_if(env, [&](const std::string& entry) {
      return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
             entry[name.size()] == '=';
    });
    env.push_back(name + "=" + value);
  };
  for (const auto& [name, value] : exec.env) {
    set(name, value);
  }
  set("KUBERNETES_EXEC_INFO", exec_info);
  return env;
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view text) {
  if (text.size() > 19 && (text.back() == 'Z' || text.back() == 'z')) {
    return ParseMicroTime(std::string(text.substr(0, text.size() - 1)) + "Z");
  }
  // An offset: +hh:mm or -hh:mm.
  if (text.size() < 25) {
    return std::nullopt;
  }
  std::string_view offset = text.substr(text.size() - 6);
  if ((offset[0] != '+' && offset[0] != '-') || offset[3] != ':' ||
      !std::all_of(offset.begin() + 1, offset.end(),
                   [](char c) { return c == ':' || (c >= '0' && c <= '9'); })) {
    return std::nullopt;
  }
  int hours = (offset[1] - '0') * 10 + (offset[2] - '0');
  int minutes = (offset[4] - '0') * 10 + (offset[5] - '0');
  if (hours > 23 || minutes > 59) {
    return std::nullopt;
  }
  auto local = ParseMicroTime(std::string(text.substr(0, text.size() - 6)) + "Z");
  if (!local) {
    return std::nullopt;
  }
  auto shift = std::chrono::hours(hours) + std::chrono::minutes(minutes);
  return offset[0] == '+' ? *local - shift : *local + shift;
}

bool RunExecPlugin(const ExecConfig& exec, std::chrono::milliseconds timeout,
                   ExecCredential* credential, std::string* error) {
  const std::string where = "user " + Quoted(exec.user) + ": exec plugin ";
  const std::string named = where + Quoted(exec.command) + ": ";
  nlohmann::json request = {{"apiVersion", exec.api_version},
                            {"kind", "ExecCredential"},
                            {"spec", {{"interactive", false}}}};
  if (!exec.cluster_info.is_null()) {
    request["spec"]["cluster"] = exec.cluster_info;
  }
  std::vector<std::string> argv = {exec.command};
  argv.insert(argv.end(), exec.args.begin(), exec.args.end());
  ChildRun run = RunChild(argv, PluginEnvironment(exec, request.dump()), timeout);
  if (run.spawn_errno != 0) {
    if (run.spawn_errno == ENOENT) {
      *error = where + "executable " + Quoted(exec.command) +
               (exec.command.find('/') == std::string::npos ? " not found on PATH" : " not found");
    } else if (run.spawn_errno == EACCES) {
      *error = where + Quoted(exec.command) + " is not executable";
    } else {
      *error = named + "cannot start: " + std::strerror(run.spawn_errno);
    }
    if (!exec.install_hint.empty()) {
      *error += " (" + Trim(exec.install_hint) + ")";
    }
    return false;
  }
  if (run.timed_out) {
    *error = named + "did not finish within " + FormatDuration(timeout) + " (killed)";
    return false;
  }
  if (run.output_too_large) {
    *error = named + "wrote more than " + std::to_string(kMaxPluginOutput) + " bytes";
    return false;
  }
  if (WIFSIGNALED(run.wait_status)) {
    *error = named + "killed by signal " + std::to_string(WTERMSIG(run.wait_status)) +
             StderrExcerpt(run.err);
    return false;
  }
  if (!WIFEXITED(run.wait_status) || WEXITSTATUS(run.wait_status) != 0) {
    *error = named + "exit status " + std::to_string(WEXITSTATUS(run.wait_status)) +
             StderrExcerpt(run.err);
    return false;
  }
  nlohmann::json output = nlohmann::json::parse(run.out, nullptr, false);
  if (output.is_discarded() || !output.is_object()) {
    *error = named + "output is not JSON (an ExecCredential was expected)";
    return false;
  }
  std::string api_version = output.value("apiVersion", std::string());
  if (!output["apiVersion"].is_string() || api_version != exec.api_version) {
    *error = named + "returned apiVersion " +
             Quoted(output["apiVersion"].is_string() ? api_version : "") + ", configured " +
             Quoted(exec.api_version);
    return false;
  }
  if (!output["kind"].is_string() || output["kind"] != "ExecCredential") {
    *error = named + "returned kind " +
             Quoted(output["kind"].is_string() ? output["kind"].get<std::string>() : "") +
             ", not ExecCredential";
    return false;
  }
  const nlohmann::json& status = output["status"];
  if (!status.is_object()) {
    *error = named + "returned no status";
    return false;
  }
  ExecCredential result;
  for (auto [field, target] : {std::pair{"token", &result.token},
                               std::pair{"clientCertificateData", &result.client_cert_pem},
                               std::pair{"clientKeyData", &result.client_key_pem}}) {
    if (status.contains(field) && !status[field].is_null()) {
      if (!status[field].is_string()) {
        *error = named + "returned a status." + field + " that is not a string";
        return false;
      }
      *target = status[field].get<std::string>();
    }
  }
  if (result.token.empty() && result.client_cert_pem.empty() && result.client_key_pem.empty()) {
    *error = named + "returned neither a token nor a client certificate and key";
    return false;
  }
  if (result.client_cert_pem.empty() != result.client_key_pem.empty()) {
    *error =
        named + (result.client_key_pem.empty() ? "returned a client certificate without a key"
                                               : "returned a client key without a certificate");
    return false;
  }
  if (!IsHeaderSafe(result.token)) {
    *error = named + "returned a token with spaces or control characters";
    return false;
  }
  if (status.contains("expirationTimestamp") && !status["expirationTimestamp"].is_null()) {
    const nlohmann::json& expiry = status["expirationTimestamp"];
    std::optional<std::chrono::system_clock::time_point> parsed;
    if (expiry.is_string()) {
      parsed = ParseRfc3339(expiry.get<std::string>());
    }
    if (!parsed) {
      *error = named + "expirationTimestamp " +
               Quoted(expiry.is_string() ? expiry.get<std::string>() : expiry.dump()) +
               " is not RFC 3339";
      return false;
    }
    result.expiry = parsed;
  }
  *credential = std::move(result);
  return true;
}

ExecCredentialSource::ExecCredentialSource(ExecConfig exec, const Clock& clock,
                                           std::chrono::nanoseconds refresh_margin,
                                           std::chrono::milliseconds timeout)
    : exec_(std::move(exec)), clock_(clock), refresh_margin_(refresh_margin), timeout_(timeout) {}

bool ExecCredentialSource::Get(ExecCredential* credential, std::string* error) {
  std::lock_guard lock(mutex_);
  auto now = clock_.WallNow();
  bool usable = cached_ && !refused_ && (!cached_->expiry || now < *cached_->expiry);
  if (usable && (!cached_->expiry || now < refresh_at_)) {
    *credential = *cached_;
    return true;
  }
  if (failed_at_ && clock_.Now() - *failed_at_ < kFailureHold) {
    // Requests that queued behind a failed run (or follow it at once) share
    // its error rather than each running the plugin again.
    *error = last_error_;
    return false;
  }
  ExecCredential fresh;
  std::string run_error;
  bool ok = RunExecPlugin(exec_, timeout_, &fresh, &run_error);
  if (ok && fresh.expiry && *fresh.expiry <= now) {
    ok = false;
    run_error = "user " + Quoted(exec_.user) + ": exec plugin " + Quoted(exec_.command) +
                ": returned a credential that expired at " + FormatMicroTime(*fresh.expiry);
  }
  if (!ok) {
    if (usable) {
      // Keep the credential while it lasts; try again halfway to its expiry.
      refresh_at_ = now + (*cached_->expiry - now) / 2;
      *credential = *cached_;
      return true;
    }
    *error = last_error_ = run_error;
    failed_at_ = clock_.Now();
    return false;
  }
  failed_at_.reset();
  fresh.generation = ++runs_;
  if (fresh.expiry) {
    auto lifetime = std::chrono::duration_cast<std::chrono::nanoseconds>(*fresh.expiry - now);
    refresh_at_ = *fresh.expiry - std::min(refresh_margin_, lifetime / 2);
  }
  cached_ = fresh;
  refused_ = false;
  *credential = std::move(fresh);
  return true;
}

void ExecCredentialSource::Invalidate(uint64_t generation) {
  std::lock_guard lock(mutex_);
  if (cached_ && cached_->generation == generation) {
    refused_ = true;
  }
}

}  // namespace kwd::kube
