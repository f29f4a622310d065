#include "dataplane/tls/upstream_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <chrono>

#include "common/crypto.h"
#include "common/log.h"
#include "common/snapshot_io.h"

namespace kwd::tls {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string OpenSslError(std::string_view what) {
  unsigned long code = ERR_peek_last_error();
  const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
  ERR_clear_error();
  return std::string(what) + (reason != nullptr ? std::string(": ") + reason : "");
}

// What the files look like (device, inode, size, mtime), following symlinks
// as a Secret mount's ..data swap needs; "" when one is missing.
std::string FileStamp(const std::string& cert, const std::string& key) {
  std::string stamp;
  for (const std::string* path : {&cert, &key}) {
    struct stat st {};
    if (::stat(path->c_str(), &st) != 0) {
      return "";
    }
    stamp += std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
             std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return stamp;
}

// The ex_data slot of a client SSL holding the "address:port" its sessions
// are kept under (a heap string, freed with the SSL).
int SessionKeyIndex() {
  static const int index = SSL_get_ex_new_index(
      0, nullptr, nullptr, nullptr,
      [](void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/,
         void* /*argp*/) { delete static_cast<std::string*>(ptr); });
  return index;
}

}  // namespace

UpstreamTls::~UpstreamTls() {
  for (auto& [key, session] : sessions_) {
    SSL_SESSION_free(session);
  }
}

std::shared_ptr<const UpstreamTls> UpstreamTls::Build(const v1::Group& group,
                                                      const UpstreamTlsOptions& options) {
  std::shared_ptr<UpstreamTls> tls(new UpstreamTls());
  const v1::UpstreamTls& spec = group.upstream_tls();
  tls->options_ = options;
  tls->server_name_ = spec.server_name();
  tls->ca_bundle_pem_ = spec.ca_bundle_pem();
  const std::string& secret = spec.client_cert_secret();
  if (!secret.empty()) {
    // It becomes a path: a Secret name, nothing that climbs out of the dir.
    if (!IsObjectName(secret)) {
      tls->error_ = "client certificate Secret name \"" + secret + "\" is not a Secret name";
    } else if (options.cert_dir.empty()) {
      tls->error_ = "client certificate Secret \"" + secret +
                    "\" needs --upstream-cert-dir (the proxy has none)";
    } else {
      tls->cert_path_ = options.cert_dir + "/" + secret + "/tls.crt";
      tls->key_path_ = options.cert_dir + "/" + secret + "/tls.key";
    }
  }
  tls->key_ =
      "tls:" + HexEncode(Sha256(tls->server_name_ + '\0' + tls->ca_bundle_pem_ + '\0' + secret));
  if (tls->error_.empty()) {
    std::lock_guard lock(tls->mu_);
    std::string error;
    if (!tls->LoadContext(&error)) {
      tls->error_ = error;
    }
  }
  if (!tls->error_.empty()) {
    Log(LogLevel::kWarn, "proxy",
        "upstream TLS of a group cannot be set up: its requests get 502 (never sent in clear)",
        {{"group", group.key()}, {"error", tls->error_}});
  }
  return tls;
}

bool UpstreamTls::LoadContext(std::string* error) const {
  ERR_clear_error();
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  if (ctx == nullptr) {
    *error = OpenSslError("cannot create a TLS client context");
    return false;
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  // A pooled connection waiting for its next request holds no record
  // buffers (about 17 KiB each way; OpenSSL 3 frees them once empty and
  // takes them again for the next record), as on the client side.
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_verify(ctx.get(), options_.verify_server ? SSL_VERIFY_PEER : SSL_VERIFY_NONE,
                     nullptr);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof kAlpn);
  if (!options_.verify_server) {
    // Nothing to verify against (see UpstreamTlsOptions::verify_server).
  } else if (ca_bundle_pem_.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      *error = OpenSslError("cannot load the system certificate store");
      return false;
    }
  } else {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(ca_bundle_pem_.data(), static_cast<int>(ca_bundle_pem_.size())), &BIO_free);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
    int count = 0;
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(store, cert);
      X509_free(cert);
      ++count;
    }
    ERR_clear_error();
    if (count == 0) {
      *error = "the caBundle holds no certificate";
      return false;
    }
  }
  if (!cert_path_.empty()) {
    cert_stamp_ = FileStamp(cert_path_, key_path_);
    if (cert_stamp_.empty()) {
      *error = "client certificate " + cert_path_ + " or its key " + key_path_ +
               " is missing (mount the Secret under --upstream-cert-dir)";
      return false;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert_path_.c_str()) != 1) {
      *error = OpenSslError("cannot load the client certificate " + cert_path_);
      return false;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), key_path_.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx.get()) != 1) {
      *error = OpenSslError("cannot load the client key " + key_path_ + " (or it does not match)");
      return false;
    }
  }
  SSL_CTX_set_session_cache_mode(ctx.get(),
                                 SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx.get(), &UpstreamTls::OnNewSession);
  SSL_CTX_set_app_data(ctx.get(), const_cast<UpstreamTls*>(this));
  ctx_ = std::move(ctx);
  next_check_ms_ = NowMs() + options_.reload_interval_ms;
  return true;
}

std::shared_ptr<SSL_CTX> UpstreamTls::Context() const {
  std::lock_guard lock(mu_);
  if (!cert_path_.empty() && ctx_ != nullptr && NowMs() >= next_check_ms_) {
    next_check_ms_ = NowMs() + options_.reload_interval_ms;
    std::string stamp = FileStamp(cert_path_, key_path_);
    if (!stamp.empty() && stamp != cert_stamp_) {
      auto previous = ctx_;
      std::string error;
      if (LoadContext(&error)) {
        Log(LogLevel::kInfo, "proxy", "upstream client certificate reloaded",
            {{"cert", cert_path_}});
        // Sessions were made with the old certificate.
        for (auto& [key, session] : sessions_) {
          SSL_SESSION_free(session);
        }
        sessions_.clear();
      } else {
        ctx_ = previous;
        cert_stamp_ = stamp;  // tried once per change, not every interval
        Log(LogLevel::kWarn, "proxy",
            "upstream client certificate changed but does not load: keeping the previous one",
            {{"cert", cert_path_}, {"error", error}});
      }
    }
  }
  return ctx_;
}

void UpstreamTls::OfferSession(SSL* ssl, std::string_view address, uint32_t port) const {
  std::string key = std::string(address) + ":" + std::to_string(port);
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(key);
    if (it != sessions_.end()) {
      SSL_set_session(ssl, it->second);
    }
  }
  SSL_set_ex_data(ssl, SessionKeyIndex(), new std::string(std::move(key)));
}

int UpstreamTls::OnNewSession(SSL* ssl, SSL_SESSION* session) {
  auto* self = static_cast<UpstreamTls*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  auto* key = static_cast<std::string*>(SSL_get_ex_data(ssl, SessionKeyIndex()));
  if (self == nullptr || key == nullptr) {
    return 0;
  }
  std::lock_guard lock(self->mu_);
  auto it = self->sessions_.find(*key);
  if (it != self->sessions_.end()) {
    SSL_SESSION_free(it->second);
    it->second = session;
  } else {
    if (self->sessions_.size() >= self->options_.max_sessions) {
      SSL_SESSION_free(self->sessions_.begin()->second);
      self->sessions_.erase(self->sessions_.begin());
    }
    self->sessions_.emplace(*key, session);
  }
  ++self->sessions_stored_;
  return 1;  // we own it now
}

uint64_t UpstreamTls::sessions_stored() const {
  std::lock_guard lock(mu_);
  return sessions_stored_;
}

}  // namespace kwd::tls
