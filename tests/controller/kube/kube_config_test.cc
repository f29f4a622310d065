#include "controller/kube/kube_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

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
  std::chrono::system_clock::time_point WallNow() const override { return {}; }
  std::chrono::steady_clock::time_point now{};
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

TEST(TokenSourceTest, StaticToken) {
  FakeClock clock;
  TokenSource tokens("fixed", "", clock);
  EXPECT_FALSE(tokens.FromFile());
  EXPECT_EQ(tokens.Token(), "fixed");
}

}  // namespace
}  // namespace kwd::kube
