#include "controller/kube/kube_config.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "tests/controller/kube/exec_plugin.h"

namespace kwd::kube {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kwd-kube-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& contents) const {
    fs::path file = path_ / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << contents;
    return file.string();
  }

 private:
  fs::path path_;
};

class FakeClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override { return now; }
  std::chrono::system_clock::time_point WallNow() const override { return wall; }
  std::chrono::steady_clock::time_point now{};
  std::chrono::system_clock::time_point wall{};
};

// "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n" etc., Base64.
constexpr char kCaPem[] = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
constexpr char kCaData[] =
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";
constexpr char kCertData[] = "Q0VSVA==";  // "CERT"
constexpr char kKeyData[] = "S0VZ";       // "KEY"

std::string KubeConfigYaml(const std::string& cluster, const std::string& user) {
  return "apiVersion: v1\nkind: Config\ncurrent-context: main\n"
         "contexts:\n"
         "- name: other\n  context: {cluster: nowhere, user: nobody}\n"
         "- name: main\n  context: {cluster: c1, user: u1, namespace: erp}\n"
         "clusters:\n- name: c1\n  cluster:\n" +
         cluster + "users:\n- name: u1\n  user:\n" + user;
}

TEST(KubeConfigTest, TokenAndCaData) {
  KubeConfig config;
  std::string error;
  ASSERT_TRUE(ParseKubeConfig(KubeConfigYaml("    server: https://api.example:6443/\n"
                                             "    certificate-authority-data: " +
                                                 std::string(kCaData) + "\n",
                                             "    token: abc123\n"),
                              "/nowhere", "", &config, &error))
      << error;
  EXPECT_EQ(config.server, "https://api.example:6443");
  EXPECT_EQ(config.ca_pem, kCaPem);
  EXPECT_EQ(config.token, "abc123");
  EXPECT_EQ(config.default_namespace, "erp");
  EXPECT_FALSE(config.insecure_skip_tls_verify);
  EXPECT_TRUE(config.client_cert_pem.empty());
}

TEST(KubeConfigTest, ClientCertificateDataAndInsecure) {
  KubeConfig config;
  std::string error;
  ASSERT_TRUE(
      ParseKubeConfig(KubeConfigYaml("    server: https://10.0.0.1\n"
                                     "    insecure-skip-tls-verify: true\n",
                                     "    client-certificate-data: " + std::string(kCertData) +
                                         "\n    client-key-data: " + kKeyData + "\n"),
                      "/nowhere", "", &config, &error))
      << error;
  EXPECT_TRUE(config.insecure_skip_tls_verify);
  EXPECT_EQ(config.client_cert_pem, "CERT");
  EXPECT_EQ(config.client_key_pem, "KEY");
  EXPECT_TRUE(config.token.empty());
}

TEST(KubeConfigTest, FilesResolveAgainstTheKubeconfigDirectory) {
  TempDir dir;
  dir.Write("pki/ca.crt", kCaPem);
  dir.Write("pki/client.crt", "CERTFILE");
  dir.Write("pki/client.key", "KEYFILE");
  dir.Write("token", "file-token\n");
  std::string path = dir.Write(
      "config", KubeConfigYaml("    server: https://api\n    certificate-authority: pki/ca.crt\n",
                               "    tokenFile: token\n"
                               "    client-certificate: pki/client.crt\n"
                               "    client-key: " +
                                   (dir.path() / "pki/client.key").string() + "\n"));
  KubeConfigSource source;
  source.kubeconfig_path = path;
  KubeConfig config;
  std::string error;
  ASSERT_TRUE(LoadKubeConfig(source, &config, &error)) << error;
  EXPECT_EQ(config.ca_pem, kCaPem);
  EXPECT_EQ(config.client_cert_pem, "CERTFILE");
  EXPECT_EQ(config.client_key_pem, "KEYFILE");
  EXPECT_EQ(config.token_file, (dir.path() / "token").string());
}

TEST(KubeConfigTest, ErrorsNameTheProblem) {
  struct Case {
    std::string name;
    std::string yaml;
    std::string context;
    std::string want_error;
  };
  const std::vector<Case> cases = {
      {"not yaml", "{{{", "", "kubeconfig"},
      {"no current context", "apiVersion: v1\n", "", "no current-context"},
      {"unknown context", KubeConfigYaml("    server: https://a\n", "    token: t\n"), "nope",
       "context \"nope\" not found"},
      {"dangling cluster", KubeConfigYaml("    server: https://a\n", "    token: t\n"), "other",
       "cluster \"nowhere\" not found"},
      {"no server", KubeConfigYaml("    insecure-skip-tls-verify: true\n", "    token: t\n"), "",
       "has no server"},
      {"bad base64",
       KubeConfigYaml("    server: https://a\n    certificate-authority-data: '%%%'\n",
                      "    token: t\n"),
       "", "certificate-authority-data is not Base64"},
      {"cert without key",
       KubeConfigYaml("    server: https://a\n",
                      "    client-certificate-data: " + std::string(kCertData) + "\n"),
       "", "both a client certificate and a key"},
      {"missing ca file",
       KubeConfigYaml("    server: https://a\n    certificate-authority: /no/such/ca.crt\n",
                      "    token: t\n"),
       "", "cannot read certificate-authority file"},
  };
  for (const Case& c : cases) {
    KubeConfig config;
    std::string error;
    EXPECT_FALSE(ParseKubeConfig(c.yaml, "/nowhere", c.context, &config, &error)) << c.name;
    EXPECT_NE(error.find(c.want_error), std::string::npos) << c.name << ": " << error;
  }
}

// A kubeconfig form kwd cannot use is an error naming the entry, never ignored.
TEST(KubeConfigTest, UnusableFormsAreErrorsNamingTheEntry) {
  struct Case {
    std::string name;
    std::string cluster;
    std::string user;
    std::string want_error;
  };
  const std::string server = "    server: https://a\n";
  const std::string exec_v1 =
      "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n";
  const std::vector<Case> cases = {
      {"auth-provider", server, "    auth-provider:\n      name: gcp\n      config: {}\n",
       "user \"u1\": auth-provider \"gcp\" is not supported"},
      {"basic auth", server, "    username: admin\n    password: secret\n",
       "user \"u1\": basic authentication (username/password) is not supported"},
      {"impersonation", server, "    token: t\n    as: alice\n",
       "user \"u1\": impersonation (as) is not supported"},
      {"unknown user field", server, "    tokn: t\n", "user \"u1\": unknown field \"tokn\""},
      {"missing token file", server, "    tokenFile: /no/such/token\n",
       "user \"u1\": cannot read tokenFile /no/such/token"},
      {"missing client cert file", server,
       "    client-certificate: /no/such/c.crt\n    client-key: /no/such/c.key\n",
       "user \"u1\": cannot read client-certificate file /no/such/c.crt"},
      {"token not a string", server, "    token: [a, b]\n", "user \"u1\": token must be a string"},
      {"proxy-url", server + "    proxy-url: http://proxy:3128\n", "    token: t\n",
       "cluster \"c1\": proxy-url is not supported"},
      {"tls-server-name", server + "    tls-server-name: api.internal\n", "    token: t\n",
       "cluster \"c1\": tls-server-name is not supported"},
      {"unknown cluster field", server + "    insecure: true\n", "    token: t\n",
       "cluster \"c1\": unknown field \"insecure\""},
      {"exec and token", server, "    token: t\n" + exec_v1 + "      interactiveMode: Never\n",
       "user \"u1\": exec cannot be combined with token"},
      {"exec without command", server,
       "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
       "      interactiveMode: Never\n",
       "user \"u1\": exec needs a command"},
      {"exec without apiVersion", server, "    exec:\n      command: aws\n",
       "user \"u1\": exec needs an apiVersion"},
      {"exec v1alpha1", server,
       "    exec:\n      apiVersion: client.authentication.k8s.io/v1alpha1\n"
       "      command: aws\n",
       "user \"u1\": exec apiVersion \"client.authentication.k8s.io/v1alpha1\" is not supported"},
      {"exec v1 without interactiveMode", server, exec_v1,
       "user \"u1\": exec interactiveMode must be set"},
      {"exec interactive always", server, exec_v1 + "      interactiveMode: Always\n",
       "user \"u1\": exec interactiveMode Always needs a terminal"},
      {"exec bad interactiveMode", server, exec_v1 + "      interactiveMode: Sometimes\n",
       "user \"u1\": exec interactiveMode \"Sometimes\" is not one of"},
      {"exec env without name", server,
       exec_v1 + "      interactiveMode: Never\n      env: [{value: x}]\n",
       "user \"u1\": exec env entry needs a name"},
      {"exec unknown field", server, exec_v1 + "      interactiveMode: Never\n      timeout: 5s\n",
       "user \"u1\": exec: unknown field \"timeout\""},
  };
  for (const Case& c : cases) {
    KubeConfig config;
    std::string error;
    EXPECT_FALSE(
        ParseKubeConfig(KubeConfigYaml(c.cluster, c.user), "/nowhere", "", &config, &error))
        << c.name;
    EXPECT_NE(error.find(c.want_error), std::string::npos) << c.name << ": " << error;
  }
}

// A token goes into the Authorization header: spaces or control characters
// (header injection) are refused as for exec plugin tokens.
TEST(KubeConfigTest, TokensWithSpacesOrControlCharactersAreRefused) {
  TempDir dir;
  const std::string server = "    server: https://a\n";
  for (const std::string& token :
       {std::string("\"abc\\r\\nX-Evil: 1\""), std::string("\"abc def\""),
        std::string("\"abc\\tdef\""), std::string("\"abc\\x7f\""),
        std::string("\"abc\\x00\"")}) {
    KubeConfig config;
    std::string error;
    EXPECT_FALSE(ParseKubeConfig(KubeConfigYaml(server, "    token: " + token + "\n"), "/nowhere",
                                 "", &config, &error))
        << token;
    EXPECT_NE(error.find("user \"u1\": token has spaces or control characters"),
              std::string::npos)
        << token << ": " << error;
  }
  for (const std::string& contents :
       {std::string("abc\r\nX-Evil: 1\n"), std::string("abc def\n"), std::string("a\tb"),
        std::string("abc\x7f")}) {
    std::string path = dir.Write("token", contents);
    KubeConfig config;
    std::string error;
    EXPECT_FALSE(ParseKubeConfig(KubeConfigYaml(server, "    tokenFile: " + path + "\n"),
                                 "/nowhere", "", &config, &error));
    EXPECT_NE(error.find("user \"u1\": tokenFile " + path +
                         " holds a token with spaces or control characters"),
              std::string::npos)
        << error;
  }
  // Surrounding whitespace (a trailing newline) is trimmed, as before.
  dir.Write("token", "  good-token\r\n");
  KubeConfig config;
  std::string error;
  EXPECT_TRUE(ParseKubeConfig(KubeConfigYaml(server, "    tokenFile: token\n"), dir.path().string(),
                              "", &config, &error))
      << error;
  EXPECT_TRUE(ParseKubeConfig(KubeConfigYaml(server, "    token: good-token\n"), "/nowhere", "",
                              &config, &error))
      << error;
}

TEST(KubeConfigTest, ExecEntryIsRead) {
  TempDir dir;
  std::string path = dir.Write(
      "config", KubeConfigYaml("    server: https://api.example:6443\n"
                               "    certificate-authority-data: " +
                                   std::string(kCaData) +
                                   "\n"
                                   "    extensions:\n"
                                   "    - name: client.authentication.k8s.io/exec\n"
                                   "      extension: {audience: erp, retries: 3, debug: true}\n",
                               "    exec:\n"
                               "      apiVersion: client.authentication.k8s.io/v1beta1\n"
                               "      command: bin/get-token\n"
                               "      args: [token, -i, erp]\n"
                               "      env:\n      - {name: AWS_PROFILE, value: prod}\n"
                               "      provideClusterInfo: true\n"
                               "      installHint: install get-token\n"));
  KubeConfigSource source;
  source.kubeconfig_path = path;
  KubeConfig config;
  std::string error;
  ASSERT_TRUE(LoadKubeConfig(source, &config, &error)) << error;
  ASSERT_TRUE(config.exec.has_value());
  const ExecConfig& exec = *config.exec;
  EXPECT_EQ(exec.user, "u1");
  EXPECT_EQ(exec.command, (dir.path() / "bin/get-token").string()) << "a path resolves";
  EXPECT_EQ(exec.args, (std::vector<std::string>{"token", "-i", "erp"}));
  ASSERT_EQ(exec.env.size(), 1u);
  EXPECT_EQ(exec.env[0].first, "AWS_PROFILE");
  EXPECT_EQ(exec.env[0].second, "prod");
  EXPECT_EQ(exec.api_version, "client.authentication.k8s.io/v1beta1");
  EXPECT_EQ(exec.install_hint, "install get-token");
  ASSERT_TRUE(exec.cluster_info.is_object()) << "provideClusterInfo";
  EXPECT_EQ(exec.cluster_info["server"], "https://api.example:6443");
  EXPECT_EQ(exec.cluster_info["certificate-authority-data"], kCaData);
  EXPECT_EQ(exec.cluster_info["config"],
            nlohmann::json({{"audience", "erp"}, {"retries", 3}, {"debug", true}}));

  // A bare command is looked up on PATH when it runs, as client-go does.
  ASSERT_TRUE(ParseKubeConfig(KubeConfigYaml("    server: https://a\n",
                                             "    exec:\n"
                                             "      apiVersion: client.authentication.k8s.io/v1\n"
                                             "      command: aws\n"
                                             "      interactiveMode: IfAvailable\n"),
                              "/nowhere", "", &config, &error))
      << error;
  EXPECT_EQ(config.exec->command, "aws");
  EXPECT_TRUE(config.exec->cluster_info.is_null());
}

ExecConfig PluginConfig(const std::string& command) {
  ExecConfig exec;
  exec.user = "eks-admin";
  exec.command = command;
  exec.api_version = "client.authentication.k8s.io/v1";
  return exec;
}

TEST(ExecCredentialSourceTest, PassesArgsEnvAndClusterInfo) {
  testing::PluginDir dir;
  ExecConfig exec = PluginConfig(dir.WritePlugin(
      "plugin", "echo \"$GREETING $HOME_SET\" > \"$0.env\"\n" + testing::TokenFromFileBody()));
  dir.Write("plugin.token", "tok");
  exec.args = {"a b", "--flag=$HOME"};
  exec.env = {{"GREETING", "hello world"}, {"HOME_SET", "${HOME}"}};
  exec.cluster_info = {{"server", "https://api"}, {"config", {{"audience", "erp"}}}};
  FakeClock clock;
  ExecCredentialSource source(exec, clock);
  ExecCredential credential;
  std::string error;
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_EQ(credential.token, "tok");
  EXPECT_EQ(dir.Read("plugin.calls"), "run a b --flag=$HOME\n") << "no shell expansion";
  EXPECT_EQ(dir.Read("plugin.env"), "hello world ${HOME}\n");
  auto info = nlohmann::json::parse(dir.Read("plugin.info"));
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_EQ(info["spec"]["cluster"]["server"], "https://api");
  EXPECT_EQ(info["spec"]["cluster"]["config"]["audience"], "erp");
}

TEST(ExecCredentialSourceTest, CachedUntilShortlyBeforeExpiryAndAfterwardsOnlyWhenInvalidated) {
  testing::PluginDir dir;
  ExecConfig exec = PluginConfig(dir.WritePlugin("plugin", testing::TokenFromFileBody()));
  FakeClock clock;
  clock.wall = std::chrono::sys_days(std::chrono::year(2026) / 12 / 1);
  dir.Write("plugin.token", "one");
  dir.Write("plugin.expiry", "2026-12-01T00:15:00+01:00");  // 23:15 UTC the day before
  ExecCredentialSource source(exec, clock, std::chrono::seconds(30));
  ExecCredential credential;
  std::string error;
  EXPECT_FALSE(source.Get(&credential, &error)) << "an already expired credential is an error";
  EXPECT_NE(error.find("expired"), std::string::npos) << error;
  int runs = dir.Runs("plugin");
  dir.Write("plugin.expiry", "2026-12-01T00:15:00Z");
  EXPECT_FALSE(source.Get(&credential, &error)) << "a failure is remembered for a second";
  EXPECT_EQ(dir.Runs("plugin"), runs);
  clock.now += ExecCredentialSource::kFailureHold;

  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_EQ(credential.token, "one");
  ASSERT_TRUE(credential.expiry.has_value());
  EXPECT_EQ(*credential.expiry, clock.wall + std::chrono::minutes(15));
  runs = dir.Runs("plugin");

  dir.Write("plugin.token", "two");
  dir.Write("plugin.expiry", "2026-12-01T00:30:00.5Z");
  clock.wall += std::chrono::minutes(14) + std::chrono::seconds(29);
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_EQ(credential.token, "one") << "31 s left: cached";
  EXPECT_EQ(dir.Runs("plugin"), runs);
  clock.wall += std::chrono::seconds(2);
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_EQ(credential.token, "two") << "29 s left: refreshed";
  EXPECT_EQ(dir.Runs("plugin"), runs + 1);
  uint64_t generation = credential.generation;

  // A 401 with this credential runs the plugin again; a 401 with an older one does not.
  dir.Write("plugin.token", "three");
  source.Invalidate(generation - 1);
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_EQ(credential.token, "two");
  source.Invalidate(generation);
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_EQ(credential.token, "three");
  EXPECT_EQ(dir.Runs("plugin"), runs + 2);

  // Without an expiry the credential is kept until a 401.
  std::filesystem::remove(dir.path() + "/plugin.expiry");
  source.Invalidate(credential.generation);
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_FALSE(credential.expiry.has_value());
  clock.wall += std::chrono::hours(24 * 365);
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_EQ(dir.Runs("plugin"), runs + 3);
}

TEST(ExecCredentialSourceTest, AFailedRefreshKeepsTheUnexpiredCredential) {
  testing::PluginDir dir;
  std::string plugin = dir.WritePlugin(
      "plugin", "if [ -e \"$0.fail\" ]; then exit 1; fi\n" + testing::TokenFromFileBody());
  FakeClock clock;
  clock.wall = std::chrono::sys_days(std::chrono::year(2026) / 12 / 1);
  dir.Write("plugin.token", "one");
  dir.Write("plugin.expiry", "2026-12-01T00:10:00Z");
  ExecCredentialSource source(PluginConfig(plugin), clock, std::chrono::seconds(60));
  ExecCredential credential;
  std::string error;
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  dir.Write("plugin.fail", "");
  clock.wall += std::chrono::minutes(9) + std::chrono::seconds(30);
  ASSERT_TRUE(source.Get(&credential, &error)) << error;
  EXPECT_EQ(credential.token, "one") << "still valid for 30 s";
  clock.wall += std::chrono::seconds(31);
  EXPECT_FALSE(source.Get(&credential, &error));
  EXPECT_NE(error.find("exit status 1"), std::string::npos) << error;
}

TEST(ExecCredentialSourceTest, ConcurrentCallersShareOneRun) {
  testing::PluginDir dir;
  ExecConfig exec =
      PluginConfig(dir.WritePlugin("plugin", "sleep 0.2\n" + testing::TokenFromFileBody()));
  dir.Write("plugin.token", "shared");
  FakeClock clock;
  ExecCredentialSource source(exec, clock);
  std::vector<std::thread> threads;
  std::atomic<int> good = 0;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      ExecCredential credential;
      std::string error;
      if (source.Get(&credential, &error) && credential.token == "shared") {
        ++good;
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(good, 4);
  EXPECT_EQ(dir.Runs("plugin"), 1);
}

TEST(ExecCredentialSourceTest, FailuresAreClearErrorsNamingTheUser) {
  testing::PluginDir dir;
  const std::string v1 =
      "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",";
  struct Case {
    std::string name;
    std::string body;  // empty: the command does not exist
    std::string want_error;
  };
  const std::vector<Case> cases = {
      {"exit code", "echo 'token expired, run aws sso login' >&2\nexit 2\n",
       "exit status 2: token expired, run aws sso login"},
      {"killed", "kill -9 $$\n", "killed by signal 9"},
      {"not json", "echo 'Welcome!'\n", "output is not JSON"},
      {"wrong apiVersion",
       "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":"
       "\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n",
       "returned apiVersion \"client.authentication.k8s.io/v1beta1\", configured "
       "\"client.authentication.k8s.io/v1\""},
      {"wrong kind",
       "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"Token\"}'\n",
       "returned kind \"Token\""},
      {"no status", "echo '" + v1 + "\"spec\":{}}'\n", "returned no status"},
      {"no credential", "echo '" + v1 + "\"status\":{}}'\n",
       "returned neither a token nor a client certificate and key"},
      {"cert without key", "echo '" + v1 + "\"status\":{\"clientCertificateData\":\"C\"}}'\n",
       "returned a client certificate without a key"},
      {"bad expiry",
       "echo '" + v1 + "\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"tomorrow\"}}'\n",
       "expirationTimestamp \"tomorrow\" is not RFC 3339"},
      {"hangs", "sleep 30\n", "did not finish within 1s"},
      {"missing command", "", "executable \"kwd-no-such-plugin\" not found on PATH"},
  };
  for (const Case& c : cases) {
    ExecConfig exec =
        PluginConfig(c.body.empty() ? "kwd-no-such-plugin" : dir.WritePlugin("plugin", c.body));
    exec.install_hint = "Install the plugin from example.com";
    FakeClock clock;
    ExecCredentialSource source(exec, clock, std::chrono::seconds(30), std::chrono::seconds(1));
    ExecCredential credential;
    std::string error;
    auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(source.Get(&credential, &error)) << c.name;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << c.name;
    EXPECT_EQ(error.rfind("user \"eks-admin\": exec plugin", 0), 0u) << c.name << ": " << error;
    EXPECT_NE(error.find(c.want_error), std::string::npos) << c.name << ": " << error;
    if (c.body.empty()) {
      EXPECT_NE(error.find("Install the plugin from example.com"), std::string::npos) << error;
    }
  }
}

TEST(KubeConfigTest, InClusterServiceAccountDirectory) {
  TempDir dir;
  dir.Write("token", "sa-token\n");
  dir.Write("ca.crt", kCaPem);
  dir.Write("namespace", "kwd-system\n");
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  KubeConfigSource source;
  source.service_account_dir = dir.path().string();
  source.getenv = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional(it->second);
  };
  KubeConfig config;
  std::string error;
  ASSERT_TRUE(LoadKubeConfig(source, &config, &error)) << error;
  EXPECT_EQ(config.server, "https://10.96.0.1:443");
  EXPECT_EQ(config.token_file, dir.path().string() + "/token");
  EXPECT_TRUE(config.token.empty());
  EXPECT_EQ(config.ca_pem, kCaPem);
  EXPECT_EQ(config.default_namespace, "kwd-system");

  env["KUBERNETES_SERVICE_HOST"] = "fd00::1";
  ASSERT_TRUE(LoadKubeConfig(source, &config, &error)) << error;
  EXPECT_EQ(config.server, "https://[fd00::1]:443");

  dir.Write("token", "sa token\n");
  EXPECT_FALSE(LoadKubeConfig(source, &config, &error));
  EXPECT_NE(error.find("service account token " + dir.path().string() +
                       "/token has spaces or control characters"),
            std::string::npos)
      << error;

  env.clear();
  EXPECT_FALSE(LoadKubeConfig(source, &config, &error));
  EXPECT_NE(error.find("KUBERNETES_SERVICE_HOST"), std::string::npos) << error;
}

TEST(KubeConfigTest, KubeconfigEnvironmentBeatsInCluster) {
  TempDir dir;
  std::string path =
      dir.Write("config", KubeConfigYaml("    server: https://from-env\n", "    token: t\n"));
  KubeConfigSource source;
  source.service_account_dir = (dir.path() / "no-sa").string();
  source.getenv = [&](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "KUBECONFIG") {
      return "/does/not/exist:" + path;
    }
    if (std::string(name) == "KUBERNETES_SERVICE_HOST") {
      return "10.96.0.1";
    }
    return std::nullopt;
  };
  KubeConfig config;
  std::string error;
  ASSERT_TRUE(LoadKubeConfig(source, &config, &error)) << error;
  EXPECT_EQ(config.server, "https://from-env");

  // --kubeconfig wins over $KUBECONFIG.
  source.kubeconfig_path =
      dir.Write("flag", KubeConfigYaml("    server: https://from-flag\n", "    token: t\n"));
  ASSERT_TRUE(LoadKubeConfig(source, &config, &error)) << error;
  EXPECT_EQ(config.server, "https://from-flag");
}

TEST(TokenSourceTest, RereadsTheFileEveryIntervalOrWhenInvalidated) {
  TempDir dir;
  std::string path = dir.Write("token", "one\n");
  FakeClock clock;
  TokenSource tokens("", path, clock, std::chrono::seconds(60));
  EXPECT_TRUE(tokens.FromFile());
  EXPECT_EQ(tokens.Token(), "one");

  dir.Write("token", "two\n");
  clock.now += std::chrono::seconds(59);
  EXPECT_EQ(tokens.Token(), "one") << "cached within the refresh interval";
  clock.now += std::chrono::seconds(1);
  EXPECT_EQ(tokens.Token(), "two");

  dir.Write("token", "three");
  tokens.Invalidate();
  EXPECT_EQ(tokens.Token(), "three") << "a 401 forces a re-read";

  fs::remove(path);
  tokens.Invalidate();
  EXPECT_EQ(tokens.Token(), "three") << "a briefly missing file keeps the last token";
}

TEST(TokenSourceTest, ARotatedTokenWithSpacesOrControlCharactersKeepsTheLastGoodOne) {
  TempDir dir;
  std::string path = dir.Write("token", "one\n");
  FakeClock clock;
  TokenSource tokens("", path, clock, std::chrono::seconds(60));
  EXPECT_EQ(tokens.Token(), "one");
  dir.Write("token", "two\r\nX-Evil: 1\n");
  tokens.Invalidate();
  EXPECT_EQ(tokens.Token(), "one");
  dir.Write("token", "two\n");
  tokens.Invalidate();
  EXPECT_EQ(tokens.Token(), "two");
}

TEST(TokenSourceTest, StaticToken) {
  FakeClock clock;
  TokenSource tokens("fixed", "", clock);
  EXPECT_FALSE(tokens.FromFile());
  EXPECT_EQ(tokens.Token(), "fixed");
}

}  // namespace
}  // namespace kwd::kube
