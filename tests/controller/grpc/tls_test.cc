// The snapshot stream over TLS with client certificates: a proxy with a
// certificate from the CA gets snapshots; one without is refused.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "common/snapshot_io.h"
#include "controller/grpc/snapshot_server.h"
#include "dataplane/xds/snapshot_client.h"

namespace kwd::snapshot_server {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kwd-grpc-tls-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    // A CA, a server certificate for 127.0.0.1 and a client certificate (openssl CLI).
    std::string d = dir_.string();
    std::string script =
        "set -e; cd " + d +
        "; openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
        "-subj /CN=kwd-test-ca 2>/dev/null"
        "; openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
        "-subj /CN=kwd-controller 2>/dev/null"
        "; printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext"
        "; openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 1 -extfile server.ext 2>/dev/null"
        "; openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr "
        "-subj /CN=kwd-proxy 2>/dev/null"
        "; openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out client.pem -days 1 2>/dev/null";
    ASSERT_EQ(std::system(script.c_str()), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::shared_ptr<const compile::CompileResult> Result() {
  auto result = std::make_shared<compile::CompileResult>();
  auto* group = result->snapshot.add_groups();
  group->set_key("erp/public");
  StampSnapshotVersion(&result->snapshot);
  return result;
}

TEST_F(TlsTest, ClientCertificateRequired) {
  SnapshotServerOptions options;
  options.listen = "127.0.0.1:0";
  options.tls.emplace();
  std::string error;
  ASSERT_TRUE(
      LoadServerTls(Path("server.pem"), Path("server.key"), Path("ca.pem"), &*options.tls, &error))
      << error;
  SnapshotServer server(options, nullptr);
  ASSERT_TRUE(server.Start(&error)) << error;
  auto result = Result();
  server.Publish(result);

  auto make_client = [&](bool with_certificate) {
    xds::SnapshotClientOptions client_options;
    client_options.target = "127.0.0.1:" + std::to_string(server.port());
    client_options.node_id = with_certificate ? "trusted" : "stranger";
    client_options.backoff.initial = milliseconds(20);
    client_options.backoff.max = milliseconds(100);
    client_options.tls.emplace();
    std::string tls_error;
    EXPECT_TRUE(xds::LoadClientTls(Path("ca.pem"), with_certificate ? Path("client.pem") : "",
                                   with_certificate ? Path("client.key") : "", &*client_options.tls,
                                   &tls_error))
        << tls_error;
    return std::make_unique<xds::SnapshotClient>(
        client_options, [](const v1::Snapshot&, std::string*) { return true; }, nullptr);
  };
  auto trusted = make_client(true);
  auto stranger = make_client(false);
  trusted->Start();
  stranger->Start();
  EXPECT_TRUE(trusted->WaitForVersion(result->snapshot.version(), seconds(10)));
  // The stranger never completes a handshake (bounded wait for a non-event).
  EXPECT_FALSE(stranger->WaitForConnected(true, milliseconds(500)));
  EXPECT_EQ(stranger->version(), "");
  auto proxies = server.Proxies();
  ASSERT_EQ(proxies.size(), 1u);
  EXPECT_EQ(proxies[0].versions.node_id, "trusted");
}

TEST_F(TlsTest, MissingFilesAreReported) {
  ServerTls tls;
  std::string error;
  EXPECT_FALSE(LoadServerTls(Path("nope.pem"), Path("server.key"), "", &tls, &error));
  EXPECT_NE(error.find("nope.pem"), std::string::npos);
  EXPECT_FALSE(LoadServerTls(Path("server.pem"), "", "", &tls, &error));
}

}  // namespace
}  // namespace kwd::snapshot_server
