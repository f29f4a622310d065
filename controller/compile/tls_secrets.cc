// The TLS Secret processor: UrlMapping.spec.tls[] and the kubernetes.io/tls
// Secrets it names become the snapshot's certificates. Each Secret is read
// once per compile (PEM, key matches the certificate, within its validity
// period at the ObjectSet's `now`); older mappings win a host that two
// certificates would serve. No I/O and no clock: `now` is an input.

#include <openssl/crypto.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/pem_files.h"
#include "controller/compile/internal.h"

namespace kwd::compile::internal {
namespace {

// "2026-12-03T10:00:00Z".
std::string Rfc3339(std::int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

constexpr std::int64_t kNotBeforeSlackSeconds = 300;

// "a, b, c, d, e and 7 more": condition messages stay short (the API
// server refuses a message over 32768 bytes) whatever a certificate holds.
std::string FirstFew(const std::vector<std::string>& items) {
  constexpr std::size_t kShown = 5;
  std::vector<std::string> shown(items.begin(),
                                 items.begin() + static_cast<long>(std::min(items.size(), kShown)));
  std::string text = JoinStrings(shown, ", ");
  if (items.size() > kShown) {
    text += " and " + std::to_string(items.size() - kShown) + " more";
  }
  return text;
}

}  // namespace

bool HostCovers(std::string_view pattern, std::string_view host) {
  if (pattern == host) {
    return true;
  }
  if (!pattern.starts_with("*.")) {
    return false;
  }
  std::string_view suffix = pattern.substr(1);  // ".example.com"
  // "a.example.com" (one label in front) or "*.example.com" itself above;
  // "*.a.example.com" and "a.b.example.com" are not one label in front.
  if (host.size() <= suffix.size() || !host.ends_with(suffix)) {
    return false;
  }
  std::string_view label = host.substr(0, host.size() - suffix.size());
  return label.find('.') == std::string_view::npos && label != "*";
}

TlsCertificates::TlsCertificates(const ObjectSet& objects, CertificateCache* cache)
    : objects_(objects), cache_(cache) {}

const CheckedSecret& TlsCertificates::CheckSecret(const std::string& ns, const std::string& name) {
  const std::string key = GroupKey(ns, name);
  auto found = checked_.find(key);
  if (found != checked_.end()) {
    return found->second;
  }
  CheckedSecret& checked = checked_[key];
  auto it = objects_.secrets().find({ns, name});
  if (it == objects_.secrets().end()) {
    checked.reason = kReasonSecretNotFound;
    checked.error = "Secret " + key + " not found";
    return checked;
  }
  const model::Secret& secret = it->second;
  checked.secret = &secret;
  checked.reason = kReasonInvalidCertificate;
  if (secret.type != model::kTlsSecretType) {
    checked.error = "Secret " + key + " is of type " + Quote(secret.type) + ", not " +
                    std::string(model::kTlsSecretType);
    return checked;
  }
  if (!secret.data_error.empty()) {
    checked.error = "Secret " + key + ": " + secret.data_error;
    return checked;
  }
  std::string error;
  if (cache_ == nullptr) {
    if (!CheckKeyPairPem(secret.tls_crt, secret.tls_key, &checked.info, &error)) {
      checked.error = "Secret " + key + ": " + error;
      return checked;
    }
  } else {
    std::string material = secret.tls_crt;
    material += '\0';
    material += secret.tls_key;
    const Sha256Digest digest = Sha256(material);
    auto verdict = cache_->verdicts.find(digest);
    if (verdict == cache_->verdicts.end()) {
      if (cache_->verdicts.size() >= CertificateCache::kMaxEntries) {
        cache_->verdicts.clear();
      }
      CertificateCache::Verdict fresh;
      if (!CheckKeyPairPem(secret.tls_crt, secret.tls_key, &fresh.info, &fresh.error) &&
          fresh.error.empty()) {
        fresh.error = "unusable";  // CheckKeyPairPem always says why; never treat it as good
      }
      verdict = cache_->verdicts.emplace(digest, std::move(fresh)).first;
    }
    if (!verdict->second.error.empty()) {
      checked.error = "Secret " + key + ": " + verdict->second.error;
      return checked;
    }
    checked.info = verdict->second.info;
  }
  const std::int64_t now = objects_.now_unix_seconds();
  if (now != 0 && checked.info.not_after != 0 && checked.info.not_after <= now) {
    checked.error =
        "Secret " + key + ": the certificate expired at " + Rfc3339(checked.info.not_after);
    return checked;
  }
  // Some slack for a certificate issued a moment ago by a clock that runs ahead.
  if (now != 0 && checked.info.not_before > now + kNotBeforeSlackSeconds) {
    checked.error = "Secret " + key + ": the certificate is not valid before " +
                    Rfc3339(checked.info.not_before);
    return checked;
  }
  checked.reason.clear();
  return checked;
}

std::vector<TlsEntry> TlsCertificates::Check(const UrlMapping& um,
                                             const std::vector<std::string>& hosts,
                                             Findings& findings, bool* valid_spec) {
  std::vector<TlsEntry> entries;
  const std::string& ns = um.metadata.namespace_;
  const bool any_host = um.spec.hosts.empty();
  if (um.spec.tls.size() > kMaxTlsEntries) {
    findings.Reject(kReasonInvalidField, "spec.tls: at most " + std::to_string(kMaxTlsEntries) +
                                             " entries, got " + std::to_string(um.spec.tls.size()));
    *valid_spec = false;
    return entries;
  }
  for (std::size_t i = 0; i < um.spec.tls.size(); ++i) {
    const model::UrlMappingTls& tls = um.spec.tls[i];
    const std::string field = "spec.tls[" + std::to_string(i) + "]";
    bool entry_ok = true;
    if (!IsObjectName(tls.secret_name)) {
      findings.Reject(kReasonInvalidField, field + ".secretName: " + Quote(tls.secret_name) +
                                               " is not a Secret name (DNS-1123 subdomain)");
      entry_ok = false;
    }
    if (tls.hosts.empty()) {
      findings.Reject(kReasonInvalidField, field + ".hosts: at least one host");
      entry_ok = false;
    }
    TlsEntry entry;
    entry.secret = GroupKey(ns, tls.secret_name);
    for (const std::string& raw : tls.hosts) {
      std::string host = AsciiLower(raw);
      if (!IsVirtualHost(host)) {
        findings.Reject(kReasonInvalidField,
                        field + ".hosts: " + Quote(raw) + " is not a host name or *.suffix");
        entry_ok = false;
        continue;
      }
      bool covered = any_host || std::any_of(hosts.begin(), hosts.end(),
                                             [&](const auto& h) { return HostCovers(h, host); });
      if (!covered) {
        findings.Reject(kReasonInvalidField,
                        field + ".hosts: " + Quote(raw) +
                            " is not one of spec.hosts nor covered by a *.suffix entry of it");
        entry_ok = false;
        continue;
      }
      if (std::find(entry.hosts.begin(), entry.hosts.end(), host) == entry.hosts.end()) {
        entry.hosts.push_back(host);
      }
    }
    if (!entry_ok) {
      *valid_spec = false;
      continue;
    }
    const CheckedSecret& checked = CheckSecret(ns, tls.secret_name);
    if (!checked.reason.empty()) {
      findings.Unresolved(checked.reason, field + ": " + checked.error +
                                              "; its hosts get the --tls-cert-dir certificates");
      continue;
    }
    std::vector<std::string> not_named;
    for (const std::string& host : entry.hosts) {
      bool named = std::any_of(checked.info.names.begin(), checked.info.names.end(),
                               [&](const std::string& name) { return HostCovers(name, host); });
      if (!named) {
        not_named.push_back(host);
      }
    }
    if (!not_named.empty()) {
      findings.Note(
          field + ": the certificate of Secret " + entry.secret + " does not name " +
          FirstFew(not_named) + " (it names " +
          (checked.info.names.empty() ? std::string("nothing") : FirstFew(checked.info.names)) +
          "); clients will not accept it there");
    }
    entry.checked = &checked;
    entries.push_back(std::move(entry));
  }
  return entries;
}

void TlsCertificates::Serve(const std::string& source, const std::vector<TlsEntry>& entries,
                            const std::function<const std::string*(const std::string&)>& owner_of,
                            Findings& findings) {
  for (const TlsEntry& entry : entries) {
    std::map<std::string, std::vector<std::string>> others;  // owner -> hosts it keeps
    for (const std::string& host : entry.hosts) {
      const std::string* owner = owner_of(host);
      if (owner != nullptr && *owner != source) {
        others[*owner].push_back(host);
        continue;
      }
      auto [taken, inserted] = host_owner_.emplace(host, HostOwner{entry.secret, source});
      if (!inserted && taken->second.secret != entry.secret) {
        findings.Note("spec.tls: host " + host + " is served the certificate of Secret " +
                      taken->second.secret + " (the entry before), not of Secret " + entry.secret);
        continue;
      }
      v1::Certificate& certificate = certificates_[entry.secret];
      if (certificate.name().empty()) {
        certificate.set_name(entry.secret);
        // As OpenSSL wrote them out again: ASCII PEM only (a proto3 string
        // and JSON need valid UTF-8; the Secret's bytes may hold anything
        // around the PEM blocks).
        certificate.set_cert_pem(entry.checked->info.cert_pem);
        certificate.set_key_pem(entry.checked->info.key_pem);
        certificate.set_not_after(entry.checked->info.not_after);
      }
      if (std::find(certificate.hosts().begin(), certificate.hosts().end(), host) ==
          certificate.hosts().end()) {
        certificate.add_hosts(host);
      }
    }
    for (const auto& [owner, hosts] : others) {
      findings.Note(
          "spec.tls: " + std::string(hosts.size() == 1 ? "host " : "hosts ") + FirstFew(hosts) +
          (hosts.size() == 1 ? " is" : " are") + " served by UrlMapping " + owner +
          " (older), which sets the certificate; Secret " + entry.secret + " is not used there");
    }
  }
}

std::int64_t TlsCertificates::AppendCertificates(v1::Snapshot* snapshot) {
  std::int64_t earliest = 0;
  for (auto& [name, certificate] : certificates_) {
    std::sort(certificate.mutable_hosts()->begin(), certificate.mutable_hosts()->end());
    if (certificate.not_after() != 0 && (earliest == 0 || certificate.not_after() < earliest)) {
      earliest = certificate.not_after();
    }
    *snapshot->add_certificates() = std::move(certificate);
  }
  certificates_.clear();
  return earliest;
}

}  // namespace kwd::compile::internal
