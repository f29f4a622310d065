#include "dataplane/tls/server_tls.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/crypto.h"
#include "common/log.h"
#include "common/openssl_ptr.h"
#include "common/pem_files.h"
#include "dataplane/tls/tls_transport.h"

namespace kwd::tls {

namespace {

// Mozilla's "intermediate" configuration (v5.7): AEAD ciphers with forward
// secrecy only.
constexpr const char kCiphers12[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
constexpr const char kCiphers13[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
constexpr const char kGroups[] = "X25519:P-256:P-384";
// Sessions resumed across certificate pairs and reloads must agree on this.
constexpr unsigned char kSessionIdContext[] = "kwd-tls";

constexpr const char* kErrorReasons[] = {
    "protocol_version", "no_shared_cipher", "client_certificate", "http_request", "eof",
    "protocol",         "renegotiation"};

std::string OpenSslErrors() {
  std::string text;
  unsigned long code = 0;
  while ((code = ERR_get_error()) != 0) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    if (!text.empty()) {
      text += "; ";
    }
    text += buffer;
  }
  return text.empty() ? std::string("unknown OpenSSL error") : text;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

// "mtime size inode" of a file (following symlinks, as Secret mounts use
// them), or "" when it is missing.
std::string FileStamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return {};
  }
  return std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " " +
         std::to_string(st.st_size) + " " + std::to_string(st.st_ino);
}

bool IsFile(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

int AcceptAnyClientCertificate(int /*preverify_ok*/, X509_STORE_CTX* /*ctx*/) {
  // Optional verification: the handshake goes on; the result is read after
  // it (SSL_get_verify_result) and only a verified certificate is forwarded.
  return 1;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool ParseVerifyClient(std::string_view text, VerifyClient* out) {
  if (text == "none") {
    *out = VerifyClient::kNone;
  } else if (text == "optional") {
    *out = VerifyClient::kOptional;
  } else if (text == "required") {
    *out = VerifyClient::kRequired;
  } else {
    return false;
  }
  return true;
}

TlsMetrics::TlsMetrics(MetricsRegistry& registry)
    : handshakes(registry.GetCounter("kwd_proxy_tls_handshakes_total",
                                     "TLS handshakes completed on --tls-listen.",
                                     {{"resumed", "false"}})),
      handshakes_resumed(registry.GetCounter("kwd_proxy_tls_handshakes_total",
                                             "TLS handshakes completed on --tls-listen.",
                                             {{"resumed", "true"}})),
      certificate_reloads(registry.GetCounter(
          "kwd_proxy_tls_certificate_reloads_total",
          "Certificate pairs loaded after a change: in --tls-cert-dir, or in the snapshot "
          "(UrlMapping.spec.tls Secrets).")),
      certificate_errors(registry.GetCounter(
          "kwd_proxy_tls_certificate_errors_total",
          "Certificate pairs in --tls-cert-dir or the snapshot refused (unreadable, bad PEM, "
          "key not matching); the pair they would replace keeps serving.")),
      certificates(registry.GetGauge("kwd_proxy_tls_certificates",
                                     "Certificate pairs serving --tls-listen (files and "
                                     "snapshot).")),
      earliest_expiry(registry.GetGauge(
          "kwd_proxy_tls_certificate_expiry_timestamp_seconds",
          "Unix time the serving certificate that expires first stops being valid (alert "
          "on this minus time()).")),
      client_certificates_unverified(registry.GetCounter(
          "kwd_proxy_tls_client_certificates_unverified_total",
          "Client certificates that did not verify (--tls-verify-client optional); not "
          "forwarded.")) {
  for (size_t i = 0; i < static_cast<size_t>(HandshakeError::kCount); ++i) {
    errors[i] = &registry.GetCounter("kwd_proxy_tls_handshake_errors_total",
                                     "TLS handshakes on --tls-listen that failed, by reason.",
                                     {{"reason", kErrorReasons[i]}});
  }
}

CertPair::~CertPair() {
  SSL_CTX_free(ctx);
}

const CertPair* CertSet::Select(std::string_view server_name) const {
  if (pairs.empty()) {
    return nullptr;
  }
  if (!server_name.empty() && server_name.back() == '.') {
    server_name.remove_suffix(1);  // an absolute name: the same host
  }
  if (!server_name.empty()) {
    std::string name = Lower(server_name);
    if (auto it = exact.find(name); it != exact.end()) {
      return it->second;
    }
    size_t dot = name.find('.');
    if (dot != std::string::npos && dot > 0) {
      if (auto it = wildcard.find(name.substr(dot + 1)); it != wildcard.end()) {
        return it->second;
      }
    }
  }
  return pairs.front().get();
}

ServerTls::ServerTls(ServerTlsOptions options, MetricsRegistry& registry)
    : options_(std::move(options)), metrics_(registry) {
  certs_.store(std::make_shared<const CertSet>());
}

ServerTls::~ServerTls() {
  Stop();
}

std::vector<ServerTls::Candidate> ServerTls::ScanDirectory(std::string* error) const {
  namespace fs = std::filesystem;
  std::vector<Candidate> found;
  std::error_code ec;
  fs::directory_iterator it(options_.cert_dir, ec);
  if (ec) {
    *error = "--tls-cert-dir " + options_.cert_dir + ": " + ec.message();
    return found;
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      break;
    }
    fs::path path = it->path();
    std::string file = path.filename().string();
    if (file.empty() || file[0] == '.') {
      continue;  // Secret mounts: ..data, ..2026_12_01_...
    }
    Candidate c;
    std::error_code type_ec;
    if (fs::is_directory(path, type_ec)) {
      if (!IsFile(path / "tls.crt") || !IsFile(path / "tls.key")) {
        continue;
      }
      c.name = file;
      c.cert_path = (path / "tls.crt").string();
      c.key_path = (path / "tls.key").string();
    } else if (path.extension() == ".crt") {
      fs::path key = path;
      key.replace_extension(".key");
      if (!IsFile(key)) {
        continue;
      }
      c.name = path.stem().string();
      c.cert_path = path.string();
      c.key_path = key.string();
    } else {
      continue;
    }
    c.fingerprint = FileStamp(c.cert_path) + "|" + FileStamp(c.key_path);
    found.push_back(std::move(c));
  }
  std::sort(found.begin(), found.end(),
            [](const Candidate& a, const Candidate& b) { return a.name < b.name; });
  return found;
}

bool ServerTls::NewContext(CertPair* pair, std::string* error) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    *error = OpenSslErrors();
    return false;
  }
  pair->ctx = ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  // Read what the socket has, not a record header and then its body: half
  // the system calls.
  SSL_CTX_set_read_ahead(ctx, 1);
  if (SSL_CTX_set_cipher_list(ctx, kCiphers12) != 1 ||
      SSL_CTX_set_ciphersuites(ctx, kCiphers13) != 1 ||
      SSL_CTX_set1_groups_list(ctx, kGroups) != 1) {
    *error = "cipher configuration: " + OpenSslErrors();
    return false;
  }
  // Stateless tickets only: no per-worker session cache to share.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(ctx, 1);
  SSL_CTX_set_session_id_context(ctx, kSessionIdContext, sizeof kSessionIdContext - 1);
  SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, &ServerTls::OnTicketKey);
  SSL_CTX_set_tlsext_servername_callback(ctx, &ServerTls::OnServerName);
  SSL_CTX_set_alpn_select_cb(ctx, &ServerTls::OnAlpn, nullptr);
  if (options_.verify_client != VerifyClient::kNone) {
    if (SSL_CTX_load_verify_locations(ctx, options_.client_ca_file.c_str(), nullptr) != 1) {
      *error = "--tls-client-ca " + options_.client_ca_file + ": " + OpenSslErrors();
      return false;
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options_.client_ca_file.c_str());
    if (names != nullptr) {
      SSL_CTX_set_client_CA_list(ctx, names);
    }
    if (options_.verify_client == VerifyClient::kRequired) {
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    } else {
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, &AcceptAnyClientCertificate);
    }
    SSL_CTX_set_verify_depth(ctx, 8);
  }
  return true;
}

std::shared_ptr<const CertPair> ServerTls::LoadPair(const Candidate& candidate,
                                                    std::string* error) {
  auto pair = std::make_shared<CertPair>();
  pair->name = candidate.name;
  pair->fingerprint = candidate.fingerprint;
  pair->cert_path = candidate.cert_path;
  pair->key_path = candidate.key_path;
  if (!NewContext(pair.get(), error)) {
    return nullptr;
  }
  SSL_CTX* ctx = pair->ctx;
  if (SSL_CTX_use_certificate_chain_file(ctx, candidate.cert_path.c_str()) != 1) {
    *error = candidate.cert_path + ": " + OpenSslErrors();
    return nullptr;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, candidate.key_path.c_str(), SSL_FILETYPE_PEM) != 1) {
    *error = candidate.key_path + ": " + OpenSslErrors();
    return nullptr;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    *error = candidate.key_path + " does not match " + candidate.cert_path + ": " + OpenSslErrors();
    return nullptr;
  }
  X509* leaf = SSL_CTX_get0_certificate(ctx);
  pair->names = CertificateNames(leaf);
  pair->not_after = CertificateNotAfter(leaf);
  if (pair->not_after != 0 && pair->not_after < time(nullptr)) {
    Log(LogLevel::kWarn, "tls", "certificate has expired; serving it anyway",
        {{"pair", candidate.name}, {"file", candidate.cert_path}});
  }
  return pair;
}

std::shared_ptr<const CertPair> ServerTls::LoadSnapshotPair(const v1::Certificate& certificate,
                                                            const std::string& fingerprint,
                                                            std::string* error) {
  auto pair = std::make_shared<CertPair>();
  pair->name = certificate.name();
  pair->from_snapshot = true;
  pair->fingerprint = fingerprint;
  if (!NewContext(pair.get(), error)) {
    return nullptr;
  }
  SSL_CTX* ctx = pair->ctx;
  const std::string& cert_pem = certificate.cert_pem();
  const std::string& key_pem = certificate.key_pem();
  BioPtr cert_bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  X509Ptr leaf(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!leaf || SSL_CTX_use_certificate(ctx, leaf.get()) != 1) {
    *error = "certificate: " + OpenSslErrors();
    return nullptr;
  }
  // The rest is the chain.
  while (X509* chain = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, chain) != 1) {
      X509_free(chain);
      *error = "certificate chain: " + OpenSslErrors();
      return nullptr;
    }
  }
  ERR_clear_error();  // the end of the chain
  BioPtr key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(
      key_bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  if (!key || SSL_CTX_use_PrivateKey(ctx, key.get()) != 1) {
    ERR_clear_error();
    *error = "no usable PEM private key";  // never the key's bytes
    return nullptr;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    *error = "the private key does not match the certificate";
    return nullptr;
  }
  pair->names.assign(certificate.hosts().begin(), certificate.hosts().end());
  pair->not_after = CertificateNotAfter(leaf.get());
  return pair;
}

void ServerTls::SetSnapshotCertificates(
    const google::protobuf::RepeatedPtrField<v1::Certificate>& certs) {
  std::lock_guard lock(publish_mu_);
  std::map<std::string, std::shared_ptr<const CertPair>> old_by_name;
  for (const auto& pair : snapshot_pairs_) {
    old_by_name[pair->name] = pair;
  }
  std::vector<std::shared_ptr<const CertPair>> pairs;
  std::map<std::string, std::string> refused;
  bool changed = certs.size() != static_cast<int>(snapshot_pairs_.size());
  // Counted once the outcome is visible (CountOutcome): a reload counted
  // while the old set still serves, or an error counted before its log
  // line, misleads whoever watches the metric (the TLS tests did).
  uint64_t reloads = 0;
  uint64_t errors = 0;
  for (const v1::Certificate& certificate : certs) {
    std::string material = certificate.cert_pem();
    material += '\0';
    material += certificate.key_pem();
    for (const std::string& host : certificate.hosts()) {
      material += '\0';
      material += host;
    }
    std::string fingerprint = HexEncode(Sha256(material));
    auto previous = old_by_name.find(certificate.name());
    if (previous != old_by_name.end() && previous->second->fingerprint == fingerprint) {
      pairs.push_back(previous->second);
      continue;
    }
    auto tried = snapshot_refused_.find(certificate.name());
    const bool retry = tried == snapshot_refused_.end() || tried->second != fingerprint;
    std::string error;
    std::shared_ptr<const CertPair> loaded =
        retry ? LoadSnapshotPair(certificate, fingerprint, &error) : nullptr;
    if (loaded != nullptr) {
      changed = true;
      pairs.push_back(std::move(loaded));
      ++reloads;
      std::string hosts;
      for (const auto& host : certificate.hosts()) {
        hosts += hosts.empty() ? host : "," + host;
      }
      Log(LogLevel::kInfo, "tls",
          previous != old_by_name.end() ? "certificate from the snapshot replaced"
                                        : "certificate from the snapshot loaded",
          {{"secret", certificate.name()}, {"hosts", hosts}});
      continue;
    }
    refused[certificate.name()] = fingerprint;
    if (retry) {
      ++errors;
      Log(LogLevel::kError, "tls",
          previous != old_by_name.end()
              ? "certificate from the snapshot refused; the previous one keeps serving"
              : "certificate from the snapshot refused",
          {{"secret", certificate.name()}, {"error", error}});
    }
    if (previous != old_by_name.end()) {
      pairs.push_back(previous->second);
    }
  }
  for (const auto& entry : old_by_name) {
    const std::string& name = entry.first;  // (clang 14 captures no structured binding)
    bool kept = std::any_of(pairs.begin(), pairs.end(),
                            [&](const auto& p) { return p->name == name; });
    if (!kept) {
      changed = true;
      Log(LogLevel::kInfo, "tls", "certificate from the snapshot removed", {{"secret", name}});
    }
  }
  snapshot_refused_ = std::move(refused);
  if (changed) {
    snapshot_pairs_ = std::move(pairs);
    PublishLocked();
  }
  CountOutcome(reloads, errors);
}

void ServerTls::CountOutcome(uint64_t reloads, uint64_t errors) {
  metrics_.certificate_reloads.Inc(reloads);
  metrics_.certificate_errors.Inc(errors);
}

void ServerTls::PublishLocked() {
  auto set = std::make_shared<CertSet>();
  set->pairs = file_pairs_;
  set->pairs.insert(set->pairs.end(), snapshot_pairs_.begin(), snapshot_pairs_.end());
  // Snapshot certificates first: the first entry for a name wins.
  auto index = [&](const std::vector<std::shared_ptr<const CertPair>>& pairs) {
    for (const auto& pair : pairs) {
      for (const std::string& name : pair->names) {
        if (name.starts_with("*.")) {
          set->wildcard.emplace(name.substr(2), pair.get());
        } else {
          set->exact.emplace(name, pair.get());
        }
      }
    }
  };
  index(snapshot_pairs_);
  index(file_pairs_);
  metrics_.certificates.Set(static_cast<double>(set->pairs.size()));
  int64_t earliest = 0;
  for (const auto& pair : set->pairs) {
    if (pair->not_after != 0 && (earliest == 0 || pair->not_after < earliest)) {
      earliest = pair->not_after;
    }
  }
  metrics_.earliest_expiry.Set(static_cast<double>(earliest));
  certs_.store(std::move(set));
}

bool ServerTls::Refresh(bool initial, std::string* error) {
  std::string scan_error;
  std::vector<Candidate> candidates = ScanDirectory(&scan_error);
  std::vector<std::shared_ptr<const CertPair>> old_pairs;
  {
    std::lock_guard lock(publish_mu_);
    old_pairs = file_pairs_;
  }
  std::map<std::string, std::shared_ptr<const CertPair>> old_by_name;
  for (const auto& pair : old_pairs) {
    old_by_name[pair->name] = pair;
  }
  if (!scan_error.empty() || candidates.empty()) {
    if (initial) {
      *error = scan_error.empty()
                   ? "--tls-cert-dir " + options_.cert_dir +
                         ": no certificate pair (NAME.crt + NAME.key, or <secret>/tls.crt + "
                         "tls.key)"
                   : scan_error;
      return false;
    }
    if (tried_.count("") == 0) {
      Log(LogLevel::kError, "tls",
          "no certificate pair in --tls-cert-dir; the loaded ones keep serving",
          {{"dir", options_.cert_dir}, {"error", scan_error}});
      tried_.clear();
      tried_[""] = "";
    }
    return false;
  }
  tried_.erase("");

  bool changed = candidates.size() != old_pairs.size();
  uint64_t reloads = 0;  // counted once visible, as in SetSnapshotCertificates
  uint64_t errors = 0;
  auto set = std::make_shared<CertSet>();  // the file pairs only
  std::map<std::string, std::string> tried;
  for (const Candidate& c : candidates) {
    tried[c.name] = c.fingerprint;
    auto previous = old_by_name.find(c.name);
    if (previous != old_by_name.end() && previous->second->fingerprint == c.fingerprint) {
      set->pairs.push_back(previous->second);
      continue;
    }
    auto tried_before = tried_.find(c.name);
    bool retry = tried_before == tried_.end() || tried_before->second != c.fingerprint;
    std::string pair_error;
    std::shared_ptr<const CertPair> loaded = retry ? LoadPair(c, &pair_error) : nullptr;
    if (loaded != nullptr) {
      changed = true;
      set->pairs.push_back(loaded);
      if (!initial) {
        ++reloads;
      }
      std::string names;
      for (const auto& n : loaded->names) {
        names += names.empty() ? n : "," + n;
      }
      Log(LogLevel::kInfo, "tls", initial ? "certificate loaded" : "certificate reloaded",
          {{"pair", c.name}, {"names", names}, {"file", c.cert_path}});
      continue;
    }
    if (retry) {
      ++errors;
      Log(LogLevel::kError, "tls",
          previous != old_by_name.end() ? "certificate pair refused; the previous one keeps serving"
                                        : "certificate pair refused",
          {{"pair", c.name}, {"error", pair_error}});
    }
    if (previous != old_by_name.end()) {
      set->pairs.push_back(previous->second);
    }
  }
  for (const auto& [name, pair] : old_by_name) {
    if (tried.count(name) != 0) {
      continue;
    }
    if (!FileStamp(pair->cert_path).empty() || !FileStamp(pair->key_path).empty()) {
      // Half of the pair is there: a copy in progress (or a mistake). The
      // loaded pair keeps serving until both files are back or both are gone.
      tried[name] = "incomplete";
      if (tried_.count(name) == 0 || tried_[name] != "incomplete") {
        ++errors;
        Log(LogLevel::kError, "tls",
            "certificate pair incomplete (certificate or key missing); the previous one keeps "
            "serving",
            {{"pair", name}, {"file", pair->cert_path}});
      }
      set->pairs.push_back(pair);
      continue;
    }
    changed = true;
    Log(LogLevel::kInfo, "tls", "certificate pair removed", {{"pair", name}});
  }
  std::sort(set->pairs.begin(), set->pairs.end(),
            [](const auto& a, const auto& b) { return a->name < b->name; });
  tried_ = std::move(tried);
  if (set->pairs.empty()) {
    if (initial) {
      *error = "--tls-cert-dir " + options_.cert_dir + ": no certificate pair could be loaded";
    }
    CountOutcome(reloads, errors);
    return false;
  }
  if (changed) {
    std::lock_guard lock(publish_mu_);
    file_pairs_ = std::move(set->pairs);
    PublishLocked();
  }
  CountOutcome(reloads, errors);
  return changed;
}

bool ServerTls::Load(std::string* error) {
  if (options_.verify_client != VerifyClient::kNone && options_.client_ca_file.empty()) {
    *error = "--tls-verify-client optional|required needs --tls-client-ca FILE";
    return false;
  }
  if (!options_.client_ca_file.empty()) {
    ERR_clear_error();
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options_.client_ca_file.c_str());
    if (names == nullptr) {
      *error = "--tls-client-ca " + options_.client_ca_file +
               ": no CA certificate could be read (" + OpenSslErrors() + ")";
      return false;
    }
    sk_X509_NAME_pop_free(names, X509_NAME_free);
  }
  {
    std::lock_guard lock(ticket_mu_);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&ticket_current_), sizeof ticket_current_) !=
        1) {
      *error = "cannot make a session ticket key: " + OpenSslErrors();
      return false;
    }
    ticket_rotated_ms_ = NowMs();
  }
  return Refresh(/*initial=*/true, error);
}

void ServerTls::CheckForChanges() {
  std::string error;
  Refresh(/*initial=*/false, &error);
  RotateTicketKeyIfDue(NowMs());
}

void ServerTls::StartWatching() {
  thread_ = std::thread([this] {
    std::unique_lock lock(stop_mu_);
    while (!stop_) {
      stop_cv_.wait_for(lock, std::chrono::milliseconds(options_.reload_interval_ms));
      if (stop_) {
        break;
      }
      lock.unlock();
      CheckForChanges();
      lock.lock();
    }
  });
}

void ServerTls::Stop() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void ServerTls::RotateTicketKeyIfDue(int64_t now_ms) {
  std::lock_guard lock(ticket_mu_);
  if (now_ms - ticket_rotated_ms_ < options_.ticket_rotation_ms) {
    return;
  }
  TicketKey next{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&next), sizeof next) != 1) {
    return;  // keep the current key; try again next time
  }
  ticket_previous_ = ticket_current_;
  has_previous_ticket_ = true;
  ticket_current_ = next;
  ticket_rotated_ms_ = now_ms;
}

std::unique_ptr<net::Transport> ServerTls::NewTransport(int fd, net::EventLoop* loop) {
  std::shared_ptr<const CertSet> certs = certs_.load();
  SSL* ssl = SSL_new(certs->pairs.front()->ctx);
  if (ssl == nullptr) {
    ERR_clear_error();
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return std::unique_ptr<net::Transport>(new TlsTransport(fd, ssl, this, std::move(certs), loop));
}

int ServerTls::OnServerName(SSL* ssl, int* /*alert*/, void* /*arg*/) {
  auto* transport = static_cast<TlsTransport*>(SSL_get_app_data(ssl));
  if (transport == nullptr || transport->certs_ == nullptr) {
    return SSL_TLSEXT_ERR_OK;
  }
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  const CertPair* pair = transport->certs_->Select(name != nullptr ? name : "");
  if (pair != nullptr && pair->ctx != SSL_get_SSL_CTX(ssl)) {
    SSL_set_SSL_CTX(ssl, pair->ctx);
  }
  return SSL_TLSEXT_ERR_OK;
}

int ServerTls::OnAlpn(SSL* /*ssl*/, const unsigned char** out, unsigned char* out_len,
                      const unsigned char* in, unsigned int in_len, void* /*arg*/) {
  // Our preference order: HTTP/2 (served by proxy::Http2Connection), then
  // HTTP/1.1.
  static const unsigned char kProtocols[] = {2,   'h', '2', 8,   'h', 't',
                                             't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_len, kProtocols, sizeof kProtocols, in, in_len) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = selected;
    return SSL_TLSEXT_ERR_OK;
  }
  // The client offers no protocol we speak: go on without ALPN; it is
  // served HTTP/1.1.
  return SSL_TLSEXT_ERR_NOACK;
}

int ServerTls::OnTicketKey(SSL* ssl, unsigned char* key_name, unsigned char* iv,
                           EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac, int encrypt) {
  auto* transport = static_cast<TlsTransport*>(SSL_get_app_data(ssl));
  if (transport == nullptr || transport->server_ == nullptr) {
    return encrypt ? -1 : 0;
  }
  return transport->server_->TicketKeyCallback(key_name, iv, cipher, mac, encrypt);
}

int ServerTls::TicketKeyCallback(unsigned char* key_name, unsigned char* iv, EVP_CIPHER_CTX* cipher,
                                 EVP_MAC_CTX* mac, int encrypt) {
  TicketKey key{};
  bool renew = false;
  {
    std::lock_guard lock(ticket_mu_);
    if (encrypt) {
      key = ticket_current_;
    } else if (std::memcmp(key_name, ticket_current_.name, sizeof key.name) == 0) {
      key = ticket_current_;
    } else if (has_previous_ticket_ &&
               std::memcmp(key_name, ticket_previous_.name, sizeof key.name) == 0) {
      key = ticket_previous_;
      renew = true;
    } else {
      return 0;  // unknown key (another process, or older than two rotations): full handshake
    }
  }
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key.hmac, sizeof key.hmac),
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>("SHA256"), 0),
      OSSL_PARAM_construct_end()};
  if (encrypt) {
    std::memcpy(key_name, key.name, sizeof key.name);
    if (RAND_bytes(iv, 16) != 1 ||
        EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, key.aes, iv) != 1 ||
        EVP_MAC_CTX_set_params(mac, params) != 1) {
      return -1;
    }
    return 1;
  }
  if (EVP_MAC_CTX_set_params(mac, params) != 1 ||
      EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, key.aes, iv) != 1) {
    return -1;
  }
  return renew ? 2 : 1;
}

}  // namespace kwd::tls
