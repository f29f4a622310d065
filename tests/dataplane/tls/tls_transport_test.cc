// TlsTransport in-process: a server side made by ServerTls and a client side
// made by TlsTransport::Client over a socket pair, driven like the worker's
// loop drives them (non-blocking, each step until both would block).
#include "dataplane/tls/tls_transport.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "common/file.h"
#include "common/metrics.h"
#include "dataplane/tls/server_tls.h"
#include "tests/support/test_pki.h"

namespace kwd::tls {
namespace {

class TlsTransportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ =
        new std::string(::testing::TempDir() + "/kwd_tls_transport_" + std::to_string(::getpid()));
    std::filesystem::create_directories(*pki_ + "/certs");
    std::string error;
    ASSERT_TRUE(testing::MakeTestPki(*pki_, &error)) << error;
    std::filesystem::copy_file(*pki_ + "/server.pem", *pki_ + "/certs/server.crt");
    std::filesystem::copy_file(*pki_ + "/server.key", *pki_ + "/certs/server.key");
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*pki_);
    delete pki_;
  }

  void SetUp() override {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds_), 0);
    client_ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(client_ctx_, TLS1_2_VERSION);
    ASSERT_EQ(SSL_CTX_load_verify_locations(client_ctx_, (*pki_ + "/ca.pem").c_str(), nullptr), 1);
    SSL_CTX_set_verify(client_ctx_, SSL_VERIFY_PEER, nullptr);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    ::close(fds_[0]);
    ::close(fds_[1]);
    SSL_CTX_free(client_ctx_);
  }

  // A server transport on `loop` (certificates from the test PKI) and a
  // client over the socket pair, both handshakes done, the server's records
  // leaving with the loop's batch (FlushSends) as in a worker.
  void HandshakeOnLoop(net::EventLoop& loop) {
    ServerTlsOptions options;
    options.cert_dir = *pki_ + "/certs";
    server_tls_ = std::make_unique<ServerTls>(options, registry_);
    std::string error;
    ASSERT_TRUE(server_tls_->Load(&error)) << error;
    server_ = server_tls_->NewTransport(fds_[0], &loop);
    client_ = TlsTransport::Client(client_ctx_, fds_[1], testing::kTestServerName, &error);
    ASSERT_NE(client_, nullptr) << error;
    bool done = false;
    for (int i = 0; i < 100 && !done; ++i) {
      ASSERT_NE(client_->Handshake(), net::Transport::HandshakeStatus::kFailed) << client_->error();
      ASSERT_NE(server_->Handshake(), net::Transport::HandshakeStatus::kFailed) << server_->error();
      loop.FlushSends();  // the end of the worker's batch
      done = client_->established() && server_->established();
    }
    ASSERT_TRUE(done);
  }

  // Steps both handshakes until neither progresses; true when both are done.
  static bool HandshakeBoth(net::Transport& a, net::Transport& b) {
    for (int i = 0; i < 100; ++i) {
      auto sa = a.Handshake();
      auto sb = b.Handshake();
      if (sa == net::Transport::HandshakeStatus::kFailed ||
          sb == net::Transport::HandshakeStatus::kFailed) {
        return false;
      }
      if (sa == net::Transport::HandshakeStatus::kDone &&
          sb == net::Transport::HandshakeStatus::kDone) {
        return true;
      }
    }
    return false;
  }

  // server_: ServerTls (the test certificate) over fds_[0]; client_: a
  // client over fds_[1] verifying `server_name` against the test CA.
  void MakeTransports(std::string_view server_name = testing::kTestServerName) {
    ServerTlsOptions options;
    options.cert_dir = *pki_ + "/certs";
    server_tls_ = std::make_unique<ServerTls>(options, registry_);
    std::string error;
    ASSERT_TRUE(server_tls_->Load(&error)) << error;
    server_ = server_tls_->NewTransport(fds_[0]);
    client_ = TlsTransport::Client(client_ctx_, fds_[1], server_name, &error);
    ASSERT_NE(client_, nullptr) << error;
  }

  // Steps the handshakes until the client is done (it has the server's whole
  // flight), before the server is.
  void HandshakeClientFirst() {
    for (int i = 0; i < 10; ++i) {
      ASSERT_NE(client_->Handshake(), net::Transport::HandshakeStatus::kFailed) << client_->error();
      if (client_->established()) {
        break;
      }
      ASSERT_NE(server_->Handshake(), net::Transport::HandshakeStatus::kFailed) << server_->error();
    }
  }

  static std::string* pki_;
  int fds_[2] = {-1, -1};
  SSL_CTX* client_ctx_ = nullptr;
  MetricsRegistry registry_;
  std::unique_ptr<ServerTls> server_tls_;  // outlives its transport (declared first)
  std::unique_ptr<net::Transport> server_;
  std::unique_ptr<TlsTransport> client_;
};

std::string* TlsTransportTest::pki_ = nullptr;

bool ReadFile(const std::string& path, std::string* out) {
  return ReadWholeFile(path, out);
}

TEST_F(TlsTransportTest, ClientAndServerHandshakeVerifyAndExchangeData) {
  ASSERT_NO_FATAL_FAILURE(MakeTransports());
  EXPECT_FALSE(server_->established());
  EXPECT_EQ(server_->tls(), nullptr);
  ASSERT_TRUE(HandshakeBoth(*client_, *server_)) << client_->error() << " / " << server_->error();
  ASSERT_NE(client_->tls(), nullptr);
  EXPECT_TRUE(client_->tls()->peer_certificate);
  EXPECT_TRUE(client_->tls()->peer_verified);
  EXPECT_EQ(client_->tls()->version, "TLSv1.3");
  EXPECT_EQ(server_->tls()->server_name, testing::kTestServerName);
  EXPECT_GT(server_->tls()->cipher_bits, 0);

  ASSERT_EQ(client_->Write("ping", 4), 4);
  char buf[64];
  bool drained = false;
  ssize_t n = server_->Read(buf, sizeof buf, &drained);
  ASSERT_EQ(n, 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
  EXPECT_TRUE(drained) << "everything the socket had was read";
  EXPECT_EQ(server_->Read(buf, sizeof buf, &drained), net::Transport::kWouldBlock);
  EXPECT_TRUE(drained);
  // close_notify reads as the end of the stream.
  client_->Shutdown();
  EXPECT_EQ(server_->Read(buf, sizeof buf, &drained), net::Transport::kEof);
}

// True when the socket has bytes to read (without taking them).
bool HasBytes(int fd) {
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

bool HasResumableSession(SSL* ssl) {
  SSL_SESSION* session = SSL_get1_session(ssl);
  bool resumable = session != nullptr && SSL_SESSION_is_resumable(session) == 1;
  SSL_SESSION_free(session);
  return resumable;
}

TEST_F(TlsTransportTest, Tls13TicketLeavesWithTheFirstResponseWhenTheRequestCameWithFinished) {
  ASSERT_NO_FATAL_FAILURE(MakeTransports());
  // The client finishes first (it has the server's whole flight) and sends
  // its request at once, as browsers, curl and wrk do.
  ASSERT_NO_FATAL_FAILURE(HandshakeClientFirst());
  ASSERT_TRUE(client_->established());
  ASSERT_FALSE(server_->established());
  ASSERT_EQ(client_->Write("GET", 3), 3);
  char buf[64];
  bool drained = false;
  ASSERT_EQ(server_->Read(buf, sizeof buf, &drained), 3) << server_->error();
  EXPECT_EQ(server_->Read(buf, sizeof buf, &drained), net::Transport::kWouldBlock);
  EXPECT_FALSE(HasBytes(fds_[1])) << "the ticket waits for the response";
  ASSERT_EQ(server_->Write("200", 3), 3);
  ASSERT_EQ(client_->Read(buf, sizeof buf, &drained), 3) << client_->error();
  EXPECT_EQ(std::string(buf, 3), "200");
  EXPECT_TRUE(HasResumableSession(client_->ssl()))
      << "the ticket came before the response";
  EXPECT_FALSE(HasBytes(fds_[1]));
}

TEST_F(TlsTransportTest, Tls13TicketIsSentAtOnceWhenNoRequestCameWithTheHandshake) {
  ASSERT_NO_FATAL_FAILURE(MakeTransports());
  ASSERT_TRUE(HandshakeBoth(*client_, *server_)) << client_->error() << " / " << server_->error();
  char buf[64];
  bool drained = false;
  EXPECT_EQ(server_->Read(buf, sizeof buf, &drained), net::Transport::kWouldBlock);
  ASSERT_TRUE(HasBytes(fds_[1])) << "the ticket was sent";
  EXPECT_EQ(client_->Read(buf, sizeof buf, &drained), net::Transport::kWouldBlock);
  EXPECT_TRUE(HasResumableSession(client_->ssl()));
}

TEST_F(TlsTransportTest, HeldTicketLeavesWithCloseNotify) {
  ASSERT_NO_FATAL_FAILURE(MakeTransports());
  ASSERT_NO_FATAL_FAILURE(HandshakeClientFirst());
  ASSERT_FALSE(server_->established());
  ASSERT_EQ(client_->Write("GET", 3), 3);
  char buf[64];
  bool drained = false;
  ASSERT_EQ(server_->Read(buf, sizeof buf, &drained), 3) << server_->error();
  EXPECT_FALSE(HasBytes(fds_[1]));
  server_->Shutdown();
  EXPECT_EQ(client_->Read(buf, sizeof buf, &drained), net::Transport::kEof) << client_->error();
  EXPECT_TRUE(HasResumableSession(client_->ssl()));
}

TEST_F(TlsTransportTest, ClientRefusesAServerWhoseCertificateLacksTheName) {
  ASSERT_NO_FATAL_FAILURE(MakeTransports("elsewhere.example"));
  EXPECT_FALSE(HandshakeBoth(*client_, *server_));
  EXPECT_NE(client_->error().find("certificate verify failed"), std::string::npos)
      << client_->error();
  EXPECT_EQ(client_->tls(), nullptr);
}

TEST(CertSetTest, ExactThenWildcardThenFirst) {
  auto a = std::make_shared<CertPair>();
  a->name = "a";
  auto b = std::make_shared<CertPair>();
  b->name = "b";
  auto w = std::make_shared<CertPair>();
  w->name = "w";
  CertSet set;
  set.pairs = {a, b, w};
  set.exact["b.example"] = b.get();
  set.exact["x.wild.example"] = b.get();
  set.wildcard["wild.example"] = w.get();
  EXPECT_EQ(set.Select("B.Example"), b.get());
  EXPECT_EQ(set.Select("x.wild.example"), b.get()) << "exact beats wildcard";
  EXPECT_EQ(set.Select("y.wild.example"), w.get());
  EXPECT_EQ(set.Select("y.x.wild.example"), a.get()) << "a wildcard covers one label";
  EXPECT_EQ(set.Select("wild.example"), a.get());
  EXPECT_EQ(set.Select(""), a.get());
  EXPECT_EQ(set.Select(".wild.example"), a.get());
}

// UrlMapping.spec.tls certificates from the snapshot beside --tls-cert-dir.
TEST_F(TlsTransportTest, SnapshotCertificatesServeTheirListedHostsAheadOfFiles) {
  std::string error;
  ASSERT_TRUE(testing::MakeSelfSignedPair(*pki_, "secret", "localhost,other.example", &error))
      << error;
  std::string cert_pem;
  std::string key_pem;
  ASSERT_TRUE(ReadFile(*pki_ + "/secret.pem", &cert_pem));
  ASSERT_TRUE(ReadFile(*pki_ + "/secret.key", &key_pem));
  ServerTlsOptions options;
  options.cert_dir = *pki_ + "/certs";  // server.crt: localhost, kwd-controller.kwd.svc
  ServerTls server_tls(options, registry_);
  ASSERT_TRUE(server_tls.Load(&error)) << error;
  const CertPair* file = server_tls.certificates()->Select("localhost");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->name, "server");

  google::protobuf::RepeatedPtrField<v1::Certificate> certificates;
  v1::Certificate* certificate = certificates.Add();
  certificate->set_name("erp/erp-tls");
  certificate->add_hosts("*.wild.example");
  certificate->add_hosts("localhost");
  certificate->set_cert_pem(cert_pem);
  certificate->set_key_pem(key_pem);
  server_tls.SetSnapshotCertificates(certificates);
  auto set = server_tls.certificates();
  // The same host in a file and a Secret: the Secret's.
  EXPECT_EQ(set->Select("localhost")->name, "erp/erp-tls");
  EXPECT_TRUE(set->Select("localhost")->from_snapshot);
  EXPECT_EQ(set->Select("a.wild.example")->name, "erp/erp-tls");
  // Names the certificate holds but spec.tls does not list: not served by it.
  EXPECT_EQ(set->Select("other.example")->name, "server");
  // A name nothing lists, or no SNI: the first file pair.
  EXPECT_EQ(set->Select("")->name, "server");
  EXPECT_EQ(set->Select(testing::kTestServerName)->name, "server");

  // The same snapshot again keeps the loaded pair (no new SSL_CTX).
  const CertPair* loaded = set->Select("localhost");
  server_tls.SetSnapshotCertificates(certificates);
  EXPECT_EQ(server_tls.certificates()->Select("localhost"), loaded);

  // A changed certificate that does not load (key of another pair): refused,
  // the previous one keeps serving.
  std::string other_key;
  ASSERT_TRUE(ReadFile(*pki_ + "/server.key", &other_key));
  certificate->set_key_pem(other_key);
  server_tls.SetSnapshotCertificates(certificates);
  EXPECT_EQ(server_tls.certificates()->Select("localhost"), loaded);

  // Gone from the snapshot: the file serves again.
  server_tls.SetSnapshotCertificates({});
  EXPECT_EQ(server_tls.certificates()->Select("localhost")->name, "server");
  EXPECT_EQ(server_tls.certificates()->pairs.size(), 1u);
}

TEST(VerifyClientTest, Parses) {
  VerifyClient v;
  EXPECT_TRUE(ParseVerifyClient("none", &v));
  EXPECT_EQ(v, VerifyClient::kNone);
  EXPECT_TRUE(ParseVerifyClient("optional", &v));
  EXPECT_EQ(v, VerifyClient::kOptional);
  EXPECT_TRUE(ParseVerifyClient("required", &v));
  EXPECT_EQ(v, VerifyClient::kRequired);
  EXPECT_FALSE(ParseVerifyClient("Required", &v));
  EXPECT_FALSE(ParseVerifyClient("", &v));
}

// On a worker's loop with io_uring, the server side's records go through the
// loop's batched I/O: written records leave with the batch's other sends
// (FlushSends), a connection waiting for a request is read ahead, and
// close_notify goes at once (the owner shuts the socket down next).
TEST_F(TlsTransportTest, OnALoopRecordsLeaveWithTheBatchAndAreReadAhead) {
  net::EventLoop::SetIoUringMode(net::IoUringMode::kAuto, nullptr);
  net::EventLoop loop;
  if (!loop.batching_sends()) {
    GTEST_SKIP() << "io_uring is not available here";
  }
  ASSERT_NO_FATAL_FAILURE(HandshakeOnLoop(loop));
  char buf[256];
  bool drained = false;
  // The client's request, received by the loop's read-ahead (one kernel
  // entry for every waiting connection) and decrypted from its bytes.
  ASSERT_EQ(client_->Write("GET", 3), 3);
  net::BatchedRecv* recv = server_->ReadAhead();
  ASSERT_NE(recv, nullptr) << "a server-side TLS transport on a loop is read ahead";
  loop.ReadAheadNow(&recv, 1);
  ASSERT_TRUE(recv->pending());
  EXPECT_GT(recv->result(), 3) << "the whole record (and the ticket's answer, if any) came";
  ssize_t n = server_->Read(buf, sizeof buf, &drained);
  ASSERT_EQ(n, 3);
  EXPECT_EQ(std::string(buf, 3), "GET");
  EXPECT_FALSE(recv->pending()) << "OpenSSL took every read-ahead byte";
  // The answer is queued, not sent, until the batch ends.
  ASSERT_EQ(server_->Write("pong", 4), 4);
  EXPECT_GT(server_->queued(), 4u) << "the record (header, tag, ticket) waits in the queue";
  EXPECT_EQ(client_->Read(buf, sizeof buf, &drained), net::Transport::kWouldBlock);
  loop.FlushSends();
  EXPECT_EQ(server_->queued(), 0u);
  n = client_->Read(buf, sizeof buf, &drained);
  ASSERT_EQ(n, 4);
  EXPECT_EQ(std::string(buf, 4), "pong");
  // close_notify does not wait for a batch.
  server_->Shutdown();
  EXPECT_EQ(server_->queued(), 0u);
  EXPECT_EQ(client_->Read(buf, sizeof buf, &drained), net::Transport::kEof);
  server_.reset();  // before the loop
}

TEST_F(TlsTransportTest, OpenSslBuffersStayWhileBusyAndGoOnceIdle) {
  net::EventLoop loop;
  ASSERT_NO_FATAL_FAILURE(HandshakeOnLoop(loop));
  char buf[256];
  bool drained = false;
  // One request and its answer: the server keeps OpenSSL's read and write
  // buffers (about 17 KiB each) for the next.
  auto exchange = [&] {
    ASSERT_EQ(client_->Write("GET", 3), 3);
    ssize_t n = 0;
    for (int i = 0; i < 100 && n <= 0; ++i) {
      n = server_->Read(buf, sizeof buf, &drained);
    }
    ASSERT_EQ(n, 3);
    ASSERT_EQ(server_->Write("pong", 4), 4);
    loop.FlushSends();
    n = 0;
    for (int i = 0; i < 100 && n <= 0; ++i) {
      n = client_->Read(buf, sizeof buf, &drained);
    }
    ASSERT_EQ(n, 4);
  };
  // A connection is busy from its second read within kKeepBuffersMs: that
  // read still frees its buffer, from then on both stay.
  exchange();
  exchange();
  exchange();
  size_t busy = mallinfo2().uordblks;
  exchange();
  EXPECT_LT(mallinfo2().uordblks, busy + 1024) << "a busy connection allocates no new buffers";
  // Idle for TlsTransport::kKeepBuffersMs: both are freed.
  net::Timer stop(&loop, [](void* l) { static_cast<net::EventLoop*>(l)->Stop(); });
  loop.Schedule(&stop, 3 * TlsTransport::kKeepBuffersMs);
  loop.Run();
  size_t idle = mallinfo2().uordblks;
  constexpr size_t kTwoBuffers = 30 * 1024;
  EXPECT_GT(busy, idle + kTwoBuffers) << "busy " << busy << " bytes allocated, idle " << idle;
  // Freed late, between what was allocated meanwhile: the loop gives the
  // pages back (one trim, about a second on).
  EXPECT_EQ(loop.heap_trims(), 0u);
  loop.Schedule(&stop, net::EventLoop::kHeapTrimDelayMs + 100);
  loop.Run();
  EXPECT_EQ(loop.heap_trims(), 1u);
  // One request after the pause keeps nothing; the next ones do.
  exchange();
  EXPECT_LT(mallinfo2().uordblks, idle + 4096);
  exchange();
  exchange();
  EXPECT_GT(mallinfo2().uordblks, idle + kTwoBuffers);
  // A busy connection that closes leaves the loop: its timer goes with it
  // (the transport outlives BeforeClose until the end of the batch).
  server_->BeforeClose();
  loop.Schedule(&stop, 3 * TlsTransport::kKeepBuffersMs);
  loop.Run();
  server_.reset();  // before the loop
}

}  // namespace
}  // namespace kwd::tls
