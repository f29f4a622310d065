// End to end over mutual TLS: a real kwd-controller serving its snapshot port
// with --grpc-tls-cert/--grpc-tls-key/--grpc-client-ca, real kwd-proxy
// processes on loopback, a demo backend, and certificates made by the openssl
// CLI at test time. Only the proxy with a certificate from the client CA gets
// the snapshot; the others (no certificate, another CA, plain text) get
// nothing and the controller logs each refusal.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/distribution/cluster_fixture.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"
#include "tests/support/test_pki.h"

namespace kwd {
namespace {

namespace fs = std::filesystem;
using testing::BinaryPath;
using testing::ClusterTest;
using testing::ErpUrlMappingYaml;
using testing::HttpGet;
using testing::LogonGroupYaml;
using testing::Process;
using testing::ReserveFreePort;
using testing::WaitFor;

std::string Config(uint16_t backend) {
  return LogonGroupYaml("public", {{"erp0_ERP_00", backend}}) + "---\n" + ErpUrlMappingYaml();
}

// Runs a binary to its end (it must exit by itself); returns the exit code.
int RunToExit(const std::vector<std::string>& argv, const fs::path& log) {
  std::string command;
  for (const auto& arg : argv) {
    command += "'" + arg + "' ";
  }
  command += "> /dev/null 2> '" + log.string() + "'";
  int status = std::system(("timeout 20 " + command).c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class MutualTlsTest : public ClusterTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(MakeDir("kwd-mtls"));
    pki_ = dir_ / "pki";
    config_ = dir_ / "config";
    fs::create_directories(pki_);
    fs::create_directories(config_);
    std::string error;
    ASSERT_TRUE(testing::MakeTestPki(pki_.string(), &error)) << error;
    ASSERT_NO_FATAL_FAILURE(StartBackend("erp0_ERP_00"));
    std::ofstream(config_ / "erp.yaml") << Config(backends_[0]->port());
  }

  std::string Pki(const std::string& name) const { return (pki_ / name).string(); }

  std::vector<std::string> ControllerArgs() const {
    return {BinaryPath("kwd-controller"),
            "serve",
            "--source=dir:" + config_.string(),
            "--grpc-listen",
            "127.0.0.1:" + std::to_string(grpc_port_),
            "--admin-listen",
            "127.0.0.1:" + std::to_string(controller_admin_),
            "--grpc-tls-cert",
            Pki("server.pem"),
            "--grpc-tls-key",
            Pki("server.key"),
            "--grpc-client-ca",
            Pki("ca.pem")};
  }

  void StartController() {
    grpc_port_ = ReserveFreePort();
    controller_admin_ = ReserveFreePort();
    StartControllerWith(ControllerArgs());
  }

  std::vector<std::string> ProxyArgs(const std::string& node, uint16_t admin,
                                     const std::vector<std::string>& tls_flags) const {
    std::vector<std::string> argv = ClusterTest::ProxyArgs(node, admin);
    argv.insert(argv.end(), tls_flags.begin(), tls_flags.end());
    return argv;
  }

  ProxyProcess& StartProxy(const std::string& node, const std::vector<std::string>& tls_flags) {
    uint16_t admin = ReserveFreePort();
    return StartProxyWith(node, admin, ProxyArgs(node, admin, tls_flags));
  }

  std::vector<std::string> ClientFlags(const std::string& client,
                                       const std::string& ca = "ca.pem") const {
    std::vector<std::string> flags = {"--controller-ca", Pki(ca)};
    if (!client.empty()) {
      flags.insert(flags.end(), {"--controller-cert", Pki(client + ".pem"), "--controller-key",
                                 Pki(client + ".key")});
    }
    return flags;
  }

  fs::path pki_;
  fs::path config_;
};

TEST_F(MutualTlsTest, OnlyTheProxyWithAClientCertificateGetsTheSnapshot) {
  StartController();
  auto& trusted = StartProxy("trusted", ClientFlags("client"));
  auto& no_certificate = StartProxy("no-certificate", ClientFlags(""));
  auto& other_ca = StartProxy("other-ca", ClientFlags("other-client"));
  auto& plain_text = StartProxy("plain-text", {});

  ASSERT_TRUE(WaitFor([&] { return HttpGet(trusted.admin, "/readyz").status == 200; }))
      << trusted.process->Log() << controller_->Log();
  auto reply = HttpGet(trusted.process->port(), "/sap/bc/ping");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.Header("X-Served-By"), "erp0_ERP_00");

  // The others have been trying while the trusted one connected; give them a
  // few more attempts (their backoff starts at 100 ms), then check they have
  // nothing: no snapshot, no routing, and the controller counts one proxy.
  ASSERT_TRUE(WaitFor([&] {
    std::string log = controller_->Log();
    size_t refusals = 0;
    for (size_t at = log.find("TLS handshake failed"); at != std::string::npos;
         at = log.find("TLS handshake failed", at + 1)) {
      ++refusals;
    }
    return refusals >= 6;
  })) << controller_->Log();
  for (auto* refused : {&no_certificate, &other_ca, &plain_text}) {
    EXPECT_EQ(HttpGet(refused->admin, "/readyz").status, 503) << refused->process->Log();
    EXPECT_EQ(HttpGet(refused->process->port(), "/sap/bc/ping").status, 503);
  }
  auto state = HttpGet(controller_admin_, "/metrics");
  EXPECT_NE(state.body.find("\nkwd_controller_connected_proxies 1"), std::string::npos)
      << state.body;

  // Each refusal is logged by the controller, with the reason.
  std::string log = controller_->Log();
  EXPECT_NE(log.find("component=grpc msg=\"TLS handshake failed\""), std::string::npos) << log;
  EXPECT_NE(log.find("peer did not return a certificate"), std::string::npos) << log;
  EXPECT_NE(log.find("certificate verify failed"), std::string::npos) << log;
  EXPECT_NE(log.find("tls=mutual"), std::string::npos) << log;
  // And the refused proxies say why they have nothing.
  EXPECT_NE(other_ca.process->Log().find("controller stream down"), std::string::npos);
}

TEST_F(MutualTlsTest, MissingOrWrongFilesStopTheBinariesWithAClearError) {
  grpc_port_ = ReserveFreePort();
  controller_admin_ = ReserveFreePort();
  auto args = ControllerArgs();
  args[args.size() - 1] = Pki("missing-ca.pem");
  EXPECT_EQ(RunToExit(args, dir_ / "c1.log"), 1);
  std::string log = ReadFile(dir_ / "c1.log");
  EXPECT_NE(log.find("--grpc-client-ca"), std::string::npos) << log;
  EXPECT_NE(log.find("missing-ca.pem"), std::string::npos) << log;

  args = ControllerArgs();
  args[args.size() - 3] = Pki("client.key");  // --grpc-tls-key of another certificate
  EXPECT_EQ(RunToExit(args, dir_ / "c2.log"), 1);
  log = ReadFile(dir_ / "c2.log");
  EXPECT_NE(log.find("does not belong to the certificate"), std::string::npos) << log;

  args = ControllerArgs();
  args.resize(args.size() - 4);  // --grpc-tls-cert without --grpc-tls-key
  args.insert(args.end(), {"--grpc-client-ca", Pki("ca.pem")});
  EXPECT_EQ(RunToExit(args, dir_ / "c3.log"), 2);

  auto proxy = ProxyArgs("p", ReserveFreePort(), ClientFlags("client"));
  proxy[proxy.size() - 1] = Pki("unreadable/client.key");
  EXPECT_EQ(RunToExit(proxy, dir_ / "p1.log"), 1);
  log = ReadFile(dir_ / "p1.log");
  EXPECT_NE(log.find("--controller-key"), std::string::npos) << log;
  EXPECT_NE(log.find("unreadable/client.key"), std::string::npos) << log;

  proxy = ProxyArgs("p", ReserveFreePort(), {"--controller-cert", Pki("client.pem")});
  EXPECT_EQ(RunToExit(proxy, dir_ / "p2.log"), 2);
}

// The controller's certificate names only its Service; the proxy connects by
// address and says which name to expect.
TEST_F(MutualTlsTest, TheProxyChecksTheControllerName) {
  grpc_port_ = ReserveFreePort();
  controller_admin_ = ReserveFreePort();
  auto args = ControllerArgs();
  args[args.size() - 5] = Pki("named-server.pem");
  args[args.size() - 3] = Pki("named-server.key");
  controller_ = std::make_unique<Process>(args, (dir_ / "controller.log").string());
  ASSERT_TRUE(controller_->started());
  auto flags = ClientFlags("client");
  flags.insert(flags.end(), {"--controller-server-name", testing::kTestServerName});
  auto& named = StartProxy("named", flags);
  auto& unnamed = StartProxy("unnamed", ClientFlags("client"));
  ASSERT_TRUE(WaitFor([&] { return HttpGet(named.admin, "/readyz").status == 200; }))
      << named.process->Log();
  EXPECT_EQ(HttpGet(unnamed.admin, "/readyz").status, 503);
  EXPECT_TRUE(WaitFor([&] {
    return unnamed.process->Log().find("controller stream down") != std::string::npos;
  })) << unnamed.process->Log();
}

}  // namespace
}  // namespace kwd
