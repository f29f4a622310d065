#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "controller/kube/kube_client.h"
#include "tests/controller/kube/exec_plugin.h"
#include "tests/fake_apiserver/fake_apiserver_process.h"

namespace kwd::kube {
namespace {

namespace fs = std::filesystem;
using testing::FakeApiServer;

constexpr char kLogonGroups[] = "/apis/dispatch.kwd.io/v1alpha1/logongroups";

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A throwaway CA, a server certificate for 127.0.0.1 and a client certificate,
// made with the openssl command line tool.
class Pki : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = (fs::temp_directory_path() / "kwd-kube-pki-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    std::ofstream(dir_ / "server.ext") << "subjectAltName=IP:127.0.0.1\n";
    std::ofstream(dir_ / "client.ext") << "extendedKeyUsage=clientAuth\n";
    std::string d = dir_.string();
    std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script =
        "cd " + d + " && openssl req -x509" + key +
        " -keyout ca.key -out ca.crt -days 1 -subj /CN=kwd-test-ca"
        " && openssl req" +
        key +
        " -keyout server.key -out server.csr -subj /CN=127.0.0.1"
        " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
        " -out server.crt -days 1 -extfile server.ext"
        " && openssl req" +
        key +
        " -keyout client.key -out client.csr -subj /CN=kwd-controller"
        " && openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
        " -out client.crt -days 1 -extfile client.ext";
    ok_ = std::system((script + " >/dev/null 2>&1").c_str()) == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    if (!ok_) {
      GTEST_SKIP() << "openssl command line tool not available";
    }
  }

  static std::vector<std::string> ServerFlags() {
    return {"--tls-cert",  (dir_ / "server.crt").string(),
            "--tls-key",   (dir_ / "server.key").string(),
            "--client-ca", (dir_ / "ca.crt").string()};
  }
  static KubeConfig ClientTls() {
    KubeConfig tls;
    tls.ca_pem = Slurp(dir_ / "ca.crt");
    tls.client_cert_pem = Slurp(dir_ / "client.crt");
    tls.client_key_pem = Slurp(dir_ / "client.key");
    return tls;
  }

  static inline fs::path dir_;
  static inline bool ok_ = false;
};

TEST_F(Pki, CaAndClientCertificateFromPemBlobs) {
  FakeApiServer server(ServerFlags(), ClientTls());
  KubeClient client(server.Config());
  ListResult list = client.List(kLogonGroups);
  EXPECT_TRUE(list.status.ok()) << list.status.ToString();
  EXPECT_EQ(server.address().rfind("https://", 0), 0u);

  WatchOptions options;
  options.resource_version = "0";
  options.timeout_seconds = 1;
  WatchResult watch = client.Watch(kLogonGroups, options, [](WatchEventType, const auto&) {});
  EXPECT_EQ(watch.end, WatchEnd::kClosed) << watch.status.ToString();
}

TEST_F(Pki, InsecureSkipVerifyStillSendsTheClientCertificate) {
  FakeApiServer server(ServerFlags(), ClientTls());
  KubeConfig config = server.Config();
  config.ca_pem.clear();
  config.insecure_skip_tls_verify = true;
  KubeClient client(config);
  EXPECT_TRUE(client.List(kLogonGroups).status.ok());
}

TEST_F(Pki, ClientCertificateFromAnExecPlugin) {
  FakeApiServer server(ServerFlags(), ClientTls());
  testing::PluginDir dir;
  ExecConfig exec;
  exec.user = "aks-user";
  exec.api_version = "client.authentication.k8s.io/v1beta1";
  exec.command = dir.WritePlugin("plugin", "cat \"$0.json\"\n");
  dir.Write("plugin.json", nlohmann::json({{"apiVersion", exec.api_version},
                                           {"kind", "ExecCredential"},
                                           {"status",
                                            {{"clientCertificateData", Slurp(dir_ / "client.crt")},
                                             {"clientKeyData", Slurp(dir_ / "client.key")}}}})
                               .dump());
  KubeConfig config = server.Config();
  config.client_cert_pem.clear();
  config.client_key_pem.clear();
  config.exec = exec;
  KubeClient client(config);
  ListResult list = client.List(kLogonGroups);
  EXPECT_TRUE(list.status.ok()) << list.status.ToString();
  EXPECT_TRUE(client.Get("/api/v1/namespaces/erp/pods/x").status.IsNotFound());
  EXPECT_EQ(dir.Runs("plugin"), 1);
}

TEST_F(Pki, FailuresAreTransportErrors) {
  FakeApiServer server(ServerFlags(), ClientTls());

  KubeConfig untrusted = server.Config();
  untrusted.ca_pem.clear();  // the system store does not know our CA
  ApiResult unverified = KubeClient(untrusted).Get("/api/v1/pods");
  EXPECT_EQ(unverified.status.http_code, 0);
  EXPECT_EQ(unverified.status.reason, "Transport");

  KubeConfig anonymous = server.Config();
  anonymous.client_cert_pem.clear();
  anonymous.client_key_pem.clear();
  ApiResult rejected = KubeClient(anonymous).Get("/api/v1/pods");
  EXPECT_EQ(rejected.status.http_code, 0) << rejected.status.ToString();
  EXPECT_FALSE(rejected.status.ok());
}

}  // namespace
}  // namespace kwd::kube
