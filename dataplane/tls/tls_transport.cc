#include "dataplane/tls/tls_transport.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/log.h"
#include "dataplane/tls/server_tls.h"

namespace kwd::tls {

namespace {

constexpr unsigned char kContentTypeHandshake = 22;

// PEM on one line: armour, base64 body without line breaks, armour.
std::string PemLine(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) {
    return {};
  }
  std::string out;
  if (PEM_write_bio_X509(bio, cert) == 1) {
    char* data = nullptr;
    long length = BIO_get_mem_data(bio, &data);
    std::string_view pem(data, length > 0 ? static_cast<size_t>(length) : 0);
    constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----";
    constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
    out.reserve(pem.size());
    out.append(kBegin).append(" ");
    size_t body_start = pem.find('\n');
    size_t body_end = pem.find(kEnd);
    if (body_start != std::string_view::npos && body_end != std::string_view::npos) {
      for (char c : pem.substr(body_start, body_end - body_start)) {
        if (c != '\n' && c != '\r') {
          out.push_back(c);
        }
      }
    }
    out.append(" ").append(kEnd);
  }
  BIO_free(bio);
  return out;
}

std::string SubjectText(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) {
    return {};
  }
  X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  long length = BIO_get_mem_data(bio, &data);
  std::string out(data, length > 0 ? static_cast<size_t>(length) : 0);
  BIO_free(bio);
  return out;
}

bool IsSelfIssued(X509* cert) {
  return X509_NAME_cmp(X509_get_subject_name(cert), X509_get_issuer_name(cert)) == 0;
}

HandshakeError Classify(int ssl_error, unsigned long code) {
  if (ssl_error == SSL_ERROR_ZERO_RETURN || ssl_error == SSL_ERROR_SYSCALL) {
    return HandshakeError::kEof;
  }
  if (ERR_GET_LIB(code) != ERR_LIB_SSL) {
    return HandshakeError::kProtocol;
  }
  switch (ERR_GET_REASON(code)) {
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
      return HandshakeError::kProtocolVersion;
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_SHARED_GROUPS:
    case SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM:
      return HandshakeError::kNoSharedCipher;
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
      return HandshakeError::kClientCertificate;
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
      return HandshakeError::kHttpRequest;
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
      return HandshakeError::kEof;
    default:
      return HandshakeError::kProtocol;
  }
}

// SSL_get_error needs the thread's error queue to hold only what the failed
// call put there. Clearing an empty queue still walks all its slots (about
// 800 instructions in OpenSSL 3.0); looking costs about 200. Only the
// handshake looks before each call: SSL_read and SSL_write do not, since
// every call of this file leaves the queue empty (each failure clears it,
// and so does a completed handshake, whose callbacks may have left entries):
// a read or write that succeeds never reads the queue, and one that fails
// finds only its own errors there. (An entry another part of the thread left
// would make one failed read or write look fatal; its failure clears it.)
void ClearErrorQueue() {
  if (ERR_peek_error() != 0) {
    ERR_clear_error();
  }
}

// A socket BIO that remembers whether its last read emptied the socket (a
// short read), so that a read which got everything can tell the owner that no
// further read is worth a system call before the next EPOLLIN edge.
//
// Server side, it also holds back the TLS 1.3 NewSessionTicket that OpenSSL
// writes when the handshake completes, so that the ticket leaves in the same
// segment as the first response (or close_notify) instead of one of its own:
// one send and one client wake-up fewer per new connection. The owner flushes
// it at once when the handshake brought no request with it (TlsTransport::Read).
//
// With `plain` (a transport with a loop), the records go through it instead
// of recv(2)/send(2): its queue, sent in the loop's batch, and its
// read-ahead.
struct SocketBio {
  int fd;
  bool* short_read;
  SSL* ssl = nullptr;           // server side only
  std::string* held = nullptr;  // server side only: ticket bytes not sent yet
  net::PlainTransport* plain = nullptr;
};

// BIO answers for a PlainTransport result (bytes, kEof, kWouldBlock,
// kError).
int FromTransport(BIO* bio, ssize_t n, bool write) {
  if (n > 0) {
    return static_cast<int>(n);
  }
  if (n == net::Transport::kEof && !write) {
    return 0;
  }
  if (n == net::Transport::kWouldBlock) {
    write ? BIO_set_retry_write(bio) : BIO_set_retry_read(bio);
  } else if (errno == 0) {
    errno = EIO;  // a read-ahead's error carries no errno: still an error, not an end
  }
  return -1;
}

// The held ticket bytes into the plain transport's queue, whole or not at
// all (it takes small writes whole unless the socket is full). False with
// the BIO's retry flag (or an error) set when they did not go.
bool QueueHeld(BIO* bio, SocketBio* s) {
  std::string& held = *s->held;
  ssize_t n = s->plain->Write(held.data(), held.size());
  if (n > 0 && static_cast<size_t>(n) < held.size()) {
    held.erase(0, static_cast<size_t>(n));
    BIO_set_retry_write(bio);
    return false;
  }
  if (n <= 0) {
    FromTransport(bio, n, true);
    return false;
  }
  std::string().swap(held);  // sent once a connection: its storage goes too
  return true;
}

// More than a few tickets' worth is not held (num_tickets is 1).
constexpr size_t kMaxHeldBytes = 4096;

// Sends the held bytes and then `data` in one system call. Returns what
// BIO_write returns for `data`: the bytes of it taken, or -1 with the retry
// flag when the socket took less than the held bytes (it is full: EPOLLOUT
// comes when it drains, and OpenSSL writes the same record again).
int SendWithHeld(BIO* bio, SocketBio* s, const char* data, int size) {
  std::string& held = *s->held;
  iovec iov[2] = {{held.data(), held.size()}, {const_cast<char*>(data), static_cast<size_t>(size)}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  for (;;) {
    ssize_t n = ::sendmsg(s->fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        BIO_set_retry_write(bio);
      }
      return -1;
    }
    auto sent = static_cast<size_t>(n);
    if (sent <= held.size()) {
      held.erase(0, sent);
      BIO_set_retry_write(bio);
      return -1;
    }
    sent -= held.size();
    std::string().swap(held);  // sent once a connection: its storage goes too
    return static_cast<int>(sent);
  }
}

int BioWrite(BIO* bio, const char* data, int size) {
  auto* s = static_cast<SocketBio*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (s->held != nullptr) {
    if (SSL_get_state(s->ssl) == TLS_ST_SW_SESSION_TICKET &&
        SSL_version(s->ssl) == TLS1_3_VERSION &&
        s->held->size() + static_cast<size_t>(size) <= kMaxHeldBytes) {
      s->held->append(data, static_cast<size_t>(size));
      return size;
    }
    if (!s->held->empty()) {
      if (s->plain == nullptr) {
        return SendWithHeld(bio, s, data, size);
      }
      if (!QueueHeld(bio, s)) {
        return -1;
      }
    }
  }
  if (s->plain != nullptr) {
    return FromTransport(bio, s->plain->Write(data, static_cast<size_t>(size)), true);
  }
  for (;;) {
    ssize_t n = ::send(s->fd, data, static_cast<size_t>(size), MSG_NOSIGNAL);
    if (n >= 0) {
      return static_cast<int>(n);
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      BIO_set_retry_write(bio);
    }
    return -1;
  }
}

int BioRead(BIO* bio, char* data, int size) {
  auto* s = static_cast<SocketBio*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (s->plain != nullptr) {
    bool drained = false;
    errno = 0;
    ssize_t n = s->plain->Read(data, static_cast<size_t>(size), &drained);
    *s->short_read = n > 0 && drained;
    return FromTransport(bio, n, false);
  }
  for (;;) {
    ssize_t n = ::recv(s->fd, data, static_cast<size_t>(size), 0);
    if (n > 0) {
      *s->short_read = n < size;
      return static_cast<int>(n);
    }
    if (n == 0) {
      return 0;
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      BIO_set_retry_read(bio);
    }
    return -1;
  }
}

long BioCtrl(BIO* /*bio*/, int command, long /*num*/, void* /*ptr*/) {
  return command == BIO_CTRL_FLUSH ? 1 : 0;
}

int BioDestroy(BIO* bio) {
  delete static_cast<SocketBio*>(BIO_get_data(bio));
  BIO_set_data(bio, nullptr);
  return 1;
}

BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kwd socket");
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_destroy(m, BioDestroy);
    return m;
  }();
  return method;
}

}  // namespace

TlsTransport::TlsTransport(int fd, SSL* ssl, ServerTls* server,
                           std::shared_ptr<const CertSet> certs, net::EventLoop* loop)
    : Transport(fd),
      plain_(loop != nullptr ? new net::PlainTransport(fd, loop) : nullptr),
      ssl_(ssl),
      server_(server),
      certs_(std::move(certs)) {
  BIO* bio = BIO_new(SocketBioMethod());
  if (bio != nullptr) {
    auto* data = new SocketBio{fd, &bio_short_read_};
    data->plain = plain_.get();
    if (server_ != nullptr) {
      data->ssl = ssl_;
      data->held = &held_;
    }
    BIO_set_data(bio, data);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl_, bio, bio);
  } else {
    SSL_set_fd(ssl_, fd);
  }
  SSL_set_app_data(ssl_, this);
  if (server_ != nullptr) {
    SSL_set_msg_callback(ssl_, &TlsTransport::OnMessage);
    SSL_set_msg_callback_arg(ssl_, this);
  }
}

TlsTransport::~TlsTransport() {
  SSL_free(ssl_);
}

std::unique_ptr<TlsTransport> TlsTransport::Client(SSL_CTX* ctx, int fd,
                                                   std::string_view server_name,
                                                   std::string* error) {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) {
    const char* reason = ERR_reason_error_string(ERR_get_error());
    *error = std::string("cannot create a TLS connection: ") +
             (reason != nullptr ? reason : "unknown error");
    return nullptr;
  }
  SSL_set_connect_state(ssl);
  if (!server_name.empty()) {
    std::string name(server_name);
    unsigned char address[16];
    bool is_ip = inet_pton(AF_INET, name.c_str(), address) == 1 ||
                 inet_pton(AF_INET6, name.c_str(), address) == 1;
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    bool ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1
                    : (SSL_set_tlsext_host_name(ssl, name.c_str()) == 1 &&
                       SSL_set1_host(ssl, name.c_str()) == 1);
    if (!ok) {
      SSL_free(ssl);
      *error = "invalid TLS server name \"" + name + "\"";
      return nullptr;
    }
  }
  return std::unique_ptr<TlsTransport>(new TlsTransport(fd, ssl, nullptr, nullptr));
}

void TlsTransport::OnMessage(int write_p, int version, int content_type, const void* buf,
                             size_t len, SSL* /*ssl*/, void* arg) {
  // A handshake record from the client after the TLS 1.2 handshake finished
  // is a renegotiation attempt (TLS 1.3 has none; its records are typed
  // application data on the wire). OpenSSL refuses it (no_renegotiation);
  // the connection is closed on the next read.
  auto* self = static_cast<TlsTransport*>(arg);
  if (write_p != 0 || content_type != SSL3_RT_HEADER || !self->established_ || len < 1 ||
      version > TLS1_2_VERSION || self->renegotiation_) {
    return;
  }
  if (static_cast<const unsigned char*>(buf)[0] == kContentTypeHandshake) {
    self->renegotiation_ = true;
  }
}

net::Transport::HandshakeStatus TlsTransport::Handshake() {
  if (established_) {
    return HandshakeStatus::kDone;
  }
  if (fatal_) {
    return HandshakeStatus::kFailed;
  }
  ClearErrorQueue();
  int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    established_ = true;
    FillInfo();
    ClearErrorQueue();  // what the callbacks left (see ClearErrorQueue)
    return HandshakeStatus::kDone;
  }
  int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    want_read_ = e == SSL_ERROR_WANT_READ;
    // A step that waits may leave its callbacks' entries (a client
    // certificate's verification in `optional` mode): another connection's
    // read on this thread must not find them (see ClearErrorQueue).
    ClearErrorQueue();
    return HandshakeStatus::kWantIo;
  }
  HandshakeFailed(e);
  return HandshakeStatus::kFailed;
}

void TlsTransport::HandshakeFailed(int ssl_error) {
  fatal_ = true;
  unsigned long code = ERR_peek_error();
  HandshakeError reason = Classify(ssl_error, code);
  if (ssl_error == SSL_ERROR_SYSCALL && errno != 0) {
    error_ = std::string("socket error during the TLS handshake: ") + std::strerror(errno);
  } else if (code == 0) {
    error_ = "the peer closed the connection during the TLS handshake";
  } else {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    error_ = buffer;
  }
  ERR_clear_error();
  if (server_ != nullptr) {
    server_->metrics().errors[static_cast<size_t>(reason)]->Inc();
    Log(LogLevel::kDebug, "tls", "TLS handshake failed", {{"error", error_}});
  }
}

void TlsTransport::FillInfo() {
  info_.version = SSL_get_version(ssl_);
  if (const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl_); cipher != nullptr) {
    info_.cipher = SSL_CIPHER_get_name(cipher);
    info_.cipher_bits = SSL_CIPHER_get_bits(cipher, nullptr);
  }
  if (const char* name = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name); name != nullptr) {
    info_.server_name = name;
  }
  const unsigned char* alpn = nullptr;
  unsigned int alpn_len = 0;
  SSL_get0_alpn_selected(ssl_, &alpn, &alpn_len);
  info_.alpn.assign(reinterpret_cast<const char*>(alpn), alpn != nullptr ? alpn_len : 0);
  info_.resumed = SSL_session_reused(ssl_) == 1;
  X509* peer = SSL_get0_peer_certificate(ssl_);
  if (peer != nullptr) {
    info_.peer_certificate = true;
    long verify = SSL_get_verify_result(ssl_);
    info_.peer_verified = verify == X509_V_OK;
    if (!info_.peer_verified) {
      info_.verify_error = X509_verify_cert_error_string(verify);
    }
    info_.peer_subject = SubjectText(peer);
    if (server_ != nullptr && info_.peer_verified) {
      // What SAP's ICM reads: the certificate and its chain, without the
      // root. The chain is the one verification built from the trusted CAs,
      // not what the client sent: a client may append any certificate (a
      // self-made CA) that played no part in verifying it. After a session
      // resumption there is none (OpenSSL keeps no verified chain in a
      // session): the certificate alone goes on.
      info_.peer_pem_line = PemLine(peer);
      STACK_OF(X509)* chain = SSL_get0_verified_chain(ssl_);
      for (int i = 0; chain != nullptr && i < sk_X509_num(chain); ++i) {
        X509* cert = sk_X509_value(chain, i);
        if (X509_cmp(cert, peer) == 0 || IsSelfIssued(cert)) {
          continue;
        }
        info_.peer_chain_pem_lines.push_back(PemLine(cert));
      }
    }
  }
  if (server_ != nullptr) {
    (info_.resumed ? server_->metrics().handshakes_resumed : server_->metrics().handshakes).Inc();
    if (info_.peer_certificate && !info_.peer_verified) {
      server_->metrics().client_certificates_unverified.Inc();
    }
  }
}

ssize_t TlsTransport::Read(char* data, size_t size, bool* drained) {
  *drained = false;
  if (!established_) {
    HandshakeStatus status = Handshake();
    if (status == HandshakeStatus::kFailed) {
      return kError;
    }
    if (status == HandshakeStatus::kWantIo) {
      *drained = want_read_;
      return kWouldBlock;
    }
  }
  if (renegotiation_ || fatal_) {
    return kError;
  }
  bio_short_read_ = false;
  int n = SSL_read(ssl_, data, static_cast<int>(std::min<size_t>(size, INT_MAX)));
  if (renegotiation_) {
    fatal_ = true;
    ClearErrorQueue();  // OpenSSL's refusal
    if (server_ != nullptr) {
      server_->metrics().errors[static_cast<size_t>(HandshakeError::kRenegotiation)]->Inc();
      Log(LogLevel::kDebug, "tls", "renegotiation refused: closing the connection");
    }
    error_ = "renegotiation refused";
    return kError;
  }
  if (n > 0) {
    app_data_read_ = true;
    if (plain_) {
      KeepBuffers();
    }
    // The socket gave less than asked and OpenSSL holds nothing more: the
    // next read would only say EAGAIN.
    *drained = bio_short_read_ && SSL_has_pending(ssl_) == 0;
    return n;
  }
  switch (SSL_get_error(ssl_, n)) {
    case SSL_ERROR_WANT_READ:
      if (!held_.empty() && !app_data_read_) {
        // The handshake brought no request: no response will carry the
        // ticket soon, so it goes now.
        FlushHeld();
      }
      *drained = true;
      return kWouldBlock;
    case SSL_ERROR_WANT_WRITE:
      return kWouldBlock;
    case SSL_ERROR_ZERO_RETURN:
      return kEof;
    case SSL_ERROR_SYSCALL:
      fatal_ = true;
      {
        int error = errno;
        ClearErrorQueue();  // a system error's entry
        return error == 0 ? kEof : kError;
      }
    default:
      fatal_ = true;
      error_ = "TLS read failed";
      ERR_clear_error();
      return kError;
  }
}

ssize_t TlsTransport::Write(const char* data, size_t size) {
  if (!established_) {
    HandshakeStatus status = Handshake();
    if (status != HandshakeStatus::kDone) {
      return status == HandshakeStatus::kFailed ? kError : kWouldBlock;
    }
  }
  if (fatal_) {
    return kError;
  }
  int n = SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(size, INT_MAX)));
  if (n > 0) {
    return n;
  }
  switch (SSL_get_error(ssl_, n)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      return kWouldBlock;
    default:
      fatal_ = true;
      ERR_clear_error();
      return kError;
  }
}

// With SSL_MODE_RELEASE_BUFFERS (the server context's mode) OpenSSL frees its
// read buffer once a record is consumed and its write buffer once a record is
// sent, and allocates them again for the next: about 1,000 instructions of
// malloc and free per keep-alive request. An idle connection must not hold
// them (about 16 KiB each), a busy one need not give them back: the mode is
// cleared at the second read within kKeepBuffersMs that brought data and set
// again, with the buffers freed, once the connection has read nothing for
// kKeepBuffersMs. The timer is armed once per busy spell, not per request.
// A connection that brings one request and waits never keeps them (while
// many are being set up at once, buffers held for a while each would leave
// holes in the heap: 2-3 KiB per idle HTTP/2 connection in
// bench/memory_bench.sh when the first read started the spell).
struct TlsTransport::BusyBuffers {
  explicit BusyBuffers(TlsTransport* owner) : timer(owner, &TlsTransport::OnBuffersTimer) {}
  net::Timer timer;
};

void TlsTransport::KeepBuffers() {
  net::EventLoop* loop = plain_->loop();
  if (loop == nullptr) {
    return;  // closing (BeforeClose, CloseBatched)
  }
  int64_t now_ms = loop->now_ms();
  // A connection is busy from its second read within kKeepBuffersMs on: one
  // that brings a request and then waits (or closes) keeps nothing.
  if (busy_ == nullptr && now_ms - last_read_ms_ < kKeepBuffersMs) {
    busy_ = std::make_unique<BusyBuffers>(this);
    SSL_clear_mode(ssl_, SSL_MODE_RELEASE_BUFFERS);
    loop->Schedule(&busy_->timer, kKeepBuffersMs);
  }
  last_read_ms_ = now_ms;
}

void TlsTransport::OnBuffersTimer(void* self) {
  auto* t = static_cast<TlsTransport*>(self);
  net::EventLoop* loop = t->plain_->loop();
  int64_t idle_ms = loop->now_ms() - t->last_read_ms_;
  if (idle_ms < kKeepBuffersMs) {
    loop->Schedule(&t->busy_->timer, kKeepBuffersMs - idle_ms);
    return;
  }
  SSL_set_mode(t->ssl_, SSL_MODE_RELEASE_BUFFERS);
  // Refused while a record is half read or half written: the mode frees
  // that buffer once it is done with.
  SSL_free_buffers(t->ssl_);
  t->busy_.reset();  // the loop no longer touches a timer whose callback ran
  // Freed late, the two buffers leave holes between what was allocated
  // meanwhile (an HTTP/2 connection's state), which glibc keeps resident:
  // 5-7 KiB per idle HTTP/2 connection after 120 requests each
  // (bench/memory_bench.sh) without the trim.
  loop->TrimHeapSoon();
}

void TlsTransport::FlushHeld() {
  if (plain_ && !held_.empty()) {
    // Into the queue: it leaves at the end of the batch.
    if (ssize_t n = plain_->Write(held_.data(), held_.size()); n > 0) {
      held_.erase(0, static_cast<size_t>(n));
    }
    if (held_.empty()) {
      std::string().swap(held_);  // an idle connection keeps no ticket storage
    }
    return;
  }
  while (!held_.empty()) {
    ssize_t n = ::send(fd_, held_.data(), held_.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;  // full (or failing): it goes with the next write, or not at all
    }
    held_.erase(0, static_cast<size_t>(n));
  }
  std::string().swap(held_);  // an idle connection keeps no ticket storage
}

void TlsTransport::WriteCloseNotify() {
  if (!established_ || fatal_) {
    return;
  }
  ERR_clear_error();
  SSL_shutdown(ssl_);  // close_notify to the socket, or to the queue; never waits
  ERR_clear_error();
}

void TlsTransport::Shutdown() {
  WriteCloseNotify();
  if (plain_) {
    (void)plain_->FlushQueued();  // before the owner's shutdown(2) or close(2)
  }
}

bool TlsTransport::BeforeClose(size_t dropped) {
  busy_.reset();  // the plain transport leaves the loop: no timer either
  return plain_ ? plain_->BeforeClose(dropped) : Transport::BeforeClose(dropped);
}

void TlsTransport::CloseBatched() {
  WriteCloseNotify();  // queued, ahead of the close
  busy_.reset();
  plain_->CloseBatched();
}

}  // namespace kwd::tls
