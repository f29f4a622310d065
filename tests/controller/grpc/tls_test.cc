// The snapshot stream over mutual TLS: a proxy with a certificate from the
// client CA gets snapshots; one without a certificate, with a certificate
// from another CA, or speaking plain text gets nothing. Certificates and keys
// are re-read when they change. Certificates come from the openssl CLI.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "common/snapshot_io.h"
#include "controller/grpc/snapshot_server.h"
#include "dataplane/xds/snapshot_client.h"
#include "tests/support/test_pki.h"

namespace kwd::snapshot_server {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

class TlsTest : public ::testing::Test {
 protected:
  // One set of certificates for the suite (openssl takes a moment).
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/kwd-grpc-tls-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    std::string error;
    ASSERT_TRUE(testing::MakeTestPki(dir_.string(), &error)) << error;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    result_ = std::make_shared<compile::CompileResult>();
    result_->snapshot.add_groups()->set_key("erp/public");
    StampSnapshotVersion(&result_->snapshot);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  ServerTls MutualTls(const std::string& server = "server") const {
    ServerTls tls;
    tls.cert_path = Path(server + ".pem");
    tls.key_path = Path(server + ".key");
    tls.client_ca_path = Path("ca.pem");
    return tls;
  }

  std::unique_ptr<SnapshotServer> StartServer(ServerTls tls) {
    SnapshotServerOptions options;
    options.listen = "127.0.0.1:0";
    options.tls = std::move(tls);
    auto server = std::make_unique<SnapshotServer>(options, nullptr);
    std::string error;
    EXPECT_TRUE(server->Start(&error)) << error;
    server->Publish(result_);
    return server;
  }

  // `tls` nullopt: plain text.
  std::unique_ptr<xds::SnapshotClient> StartClient(const SnapshotServer& server,
                                                   const std::string& node,
                                                   std::optional<xds::ClientTls> tls) {
    xds::SnapshotClientOptions options;
    options.target = "127.0.0.1:" + std::to_string(server.port());
    options.node_id = node;
    options.backoff.initial = milliseconds(20);
    options.backoff.max = milliseconds(100);
    options.tls = std::move(tls);
    auto client = std::make_unique<xds::SnapshotClient>(
        options, [](const v1::Snapshot&, std::string*) { return true; }, nullptr);
    client->Start();
    return client;
  }

  xds::ClientTls ClientTls(const std::string& client, const std::string& ca = "ca") const {
    xds::ClientTls tls;
    tls.ca_path = Path(ca + ".pem");
    if (!client.empty()) {
      tls.cert_path = Path(client + ".pem");
      tls.key_path = Path(client + ".key");
    }
    return tls;
  }

  std::vector<std::string> ConnectedNodes(const SnapshotServer& server) const {
    std::vector<std::string> nodes;
    for (const auto& proxy : server.Proxies()) {
      nodes.push_back(proxy.versions.node_id);
    }
    return nodes;
  }

  static inline fs::path dir_;
  std::shared_ptr<compile::CompileResult> result_;
};

TEST_F(TlsTest, OnlyClientsWithACertificateFromTheClientCaGetSnapshots) {
  auto server = StartServer(MutualTls());
  auto trusted = StartClient(*server, "trusted", ClientTls("client"));
  auto no_certificate = StartClient(*server, "no-certificate", ClientTls(""));
  auto other_ca = StartClient(*server, "other-ca", ClientTls("other-client"));
  auto plain_text = StartClient(*server, "plain-text", std::nullopt);
  EXPECT_TRUE(trusted->WaitForVersion(result_->snapshot.version(), seconds(10)));
  // The others never complete a handshake (bounded wait for a non-event,
  // long enough for several attempts each).
  for (auto* refused : {no_certificate.get(), other_ca.get(), plain_text.get()}) {
    EXPECT_FALSE(refused->WaitForConnected(true, milliseconds(300)));
    EXPECT_EQ(refused->version(), "");
    EXPECT_EQ(refused->acks(), 0u);
  }
  // The node id starts with the certificate's name (CN=client).
  EXPECT_EQ(ConnectedNodes(*server), std::vector<std::string>{"client/trusted"});
}

// Issue 23 item 7: with mutual TLS the node id a proxy sends cannot pass
// for another certificate's proxy: the verified certificate names it.
TEST_F(TlsTest, NodeIdComesFromTheClientCertificate) {
  auto server = StartServer(MutualTls());
  auto named = StartClient(*server, "client", ClientTls("client"));
  auto impostor = StartClient(*server, "proxy-b\nforged", ClientTls("client"));
  ASSERT_TRUE(named->WaitForVersion(result_->snapshot.version(), seconds(10)));
  ASSERT_TRUE(impostor->WaitForVersion(result_->snapshot.version(), seconds(10)));
  std::vector<std::string> nodes = ConnectedNodes(*server);
  std::sort(nodes.begin(), nodes.end());
  EXPECT_EQ(nodes, (std::vector<std::string>{"client", "client/proxy-b\\nforged"}));
  for (const auto& proxy : server->Proxies()) {
    EXPECT_EQ(proxy.certificate_identity, "client");
  }
}

TEST_F(TlsTest, TheClientVerifiesTheControllerCertificateAndName) {
  // A controller certificate from a CA the proxy does not trust.
  auto impostor = StartServer(MutualTls("other-server"));
  auto fooled = StartClient(*impostor, "fooled", ClientTls("client"));
  EXPECT_FALSE(fooled->WaitForConnected(true, milliseconds(500)));
  EXPECT_EQ(fooled->version(), "");

  // A certificate naming only kTestServerName: connecting to 127.0.0.1 needs
  // the server name, and with it the name is checked.
  auto named = StartServer(MutualTls("named-server"));
  auto unnamed = StartClient(*named, "unnamed", ClientTls("client"));
  xds::ClientTls wrong = ClientTls("client");
  wrong.server_name = "another-controller.kwd.svc";
  auto wrong_name = StartClient(*named, "wrong-name", wrong);
  xds::ClientTls right = ClientTls("client");
  right.server_name = testing::kTestServerName;
  auto right_name = StartClient(*named, "right-name", right);
  EXPECT_TRUE(right_name->WaitForVersion(result_->snapshot.version(), seconds(10)));
  EXPECT_FALSE(unnamed->WaitForConnected(true, milliseconds(300)));
  EXPECT_FALSE(wrong_name->WaitForConnected(true, milliseconds(300)));
  EXPECT_EQ(ConnectedNodes(*named), std::vector<std::string>{"client/right-name"});
}

// Rotation: the server's certificate, key and client CA are replaced (an
// atomic rename, as a Secret volume does); new connections use the new files
// without a restart.
TEST_F(TlsTest, RotatedFilesAreReloaded) {
  ServerTls tls;
  tls.cert_path = Path("live.pem");
  tls.key_path = Path("live.key");
  tls.client_ca_path = Path("live-ca.pem");
  tls.refresh = seconds(1);
  fs::copy_file(Path("server.pem"), tls.cert_path);
  fs::copy_file(Path("server.key"), tls.key_path);
  fs::copy_file(Path("ca.pem"), tls.client_ca_path);
  auto server = StartServer(tls);
  auto before = StartClient(*server, "before", ClientTls("client"));
  ASSERT_TRUE(before->WaitForVersion(result_->snapshot.version(), seconds(10)));
  before->Stop();

  for (const auto& [from, to] :
       {std::pair{"other-server.pem", tls.cert_path}, std::pair{"other-server.key", tls.key_path},
        std::pair{"other-ca.pem", tls.client_ca_path}}) {
    fs::copy_file(Path(from), to + ".new");
    fs::rename(to + ".new", to);
  }
  // Trusts the new server CA and holds a certificate of the new client CA.
  auto after = StartClient(*server, "after", ClientTls("other-client", "other-ca"));
  EXPECT_TRUE(after->WaitForVersion(result_->snapshot.version(), seconds(10)));
  // The old client certificate is no longer accepted.
  auto old = StartClient(*server, "old", ClientTls("client", "other-ca"));
  EXPECT_FALSE(old->WaitForConnected(true, milliseconds(500)));
}

TEST_F(TlsTest, BadFilesAreReportedByFlagAndPath) {
  std::string error;
  ServerTls tls = MutualTls();
  tls.cert_path = Path("nope.pem");
  EXPECT_FALSE(CheckServerTls(tls, &error));
  EXPECT_NE(error.find("--grpc-tls-cert"), std::string::npos) << error;
  EXPECT_NE(error.find("nope.pem"), std::string::npos) << error;

  tls = MutualTls();
  tls.key_path = Path("client.key");  // another certificate's key
  EXPECT_FALSE(CheckServerTls(tls, &error));
  EXPECT_NE(error.find("does not belong"), std::string::npos) << error;

  tls = MutualTls();
  tls.client_ca_path = Path("server.key");  // no certificate in it
  EXPECT_FALSE(CheckServerTls(tls, &error));
  EXPECT_NE(error.find("--grpc-client-ca"), std::string::npos) << error;
  EXPECT_NE(error.find("no PEM certificate"), std::string::npos) << error;

  EXPECT_TRUE(CheckServerTls(MutualTls(), &error)) << error;

  // A server given bad files does not start (instead of failing every handshake).
  SnapshotServerOptions options;
  options.listen = "127.0.0.1:0";
  options.tls = MutualTls();
  options.tls->key_path = Path("missing.key");
  SnapshotServer server(options, nullptr);
  EXPECT_FALSE(server.Start(&error));
  EXPECT_NE(error.find("missing.key"), std::string::npos) << error;

  xds::ClientTls client = ClientTls("client");
  client.key_path = Path("other-client.key");
  EXPECT_FALSE(xds::CheckClientTls(client, &error));
  EXPECT_NE(error.find("--controller-key"), std::string::npos) << error;
  client = ClientTls("client", "nope-ca");
  EXPECT_FALSE(xds::CheckClientTls(client, &error));
  EXPECT_NE(error.find("--controller-ca"), std::string::npos) << error;
  EXPECT_TRUE(xds::CheckClientTls(ClientTls("client"), &error)) << error;
}

}  // namespace
}  // namespace kwd::snapshot_server
