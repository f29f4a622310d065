#include "tests/support/test_pki.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace kwd::testing {
namespace {

std::string Ca(const std::string& name) {
  return "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " +
         name + ".key -out " + name + ".pem -days 2 -subj /CN=" + name +
         " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign";
}

std::string Leaf(const std::string& name, const std::string& ca, const std::string& ext) {
  return "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name +
         ".key -out " + name + ".csr -subj /CN=" + name + " && printf '" + ext + "\\n' > " + name +
         ".ext && openssl x509 -req -in " + name + ".csr -CA " + ca + ".pem -CAkey " + ca +
         ".key -CAcreateserial -out " + name + ".pem -days 2 -extfile " + name + ".ext";
}

bool RunScript(const std::string& script, std::string* error) {
  std::string command = "(" + script + ") 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *error = "cannot run openssl";
    return false;
  }
  std::string output;
  char buffer[512];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) {
    output.append(buffer, n);
  }
  int status = pclose(pipe);
  if (status != 0) {
    *error = "openssl failed: " + output;
    return false;
  }
  return true;
}

}  // namespace

bool MakeSelfSignedPair(const std::string& dir, const std::string& name,
                        const std::string& dns_names, std::string* error, int days) {
  std::string sans;
  size_t start = 0;
  while (start <= dns_names.size()) {
    size_t comma = dns_names.find(',', start);
    std::string one = dns_names.substr(start, comma == std::string::npos ? std::string::npos
                                                                          : comma - start);
    sans += (sans.empty() ? "DNS:" : ",DNS:") + one;
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  std::string script = "set -e; cd '" + dir +
                       "'; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                       "-nodes -keyout '" +
                       name + ".key' -out '" + name + ".pem' -days " + std::to_string(days) +
                       " -subj /CN=" + name + " -addext 'subjectAltName=" + sans + "'";
  return RunScript(script, error);
}

bool MakeShortLivedPair(const std::string& dns_name, long valid_seconds, std::string* cert_pem,
                        std::string* key_pem) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC",
                                                                            "P-256"),
                                                          EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  if (!key || !cert) {
    return false;
  }
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), valid_seconds);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(dns_name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  X509_set_pubkey(cert.get(), key.get());
  std::string san = "DNS:" + dns_name;
  X509_EXTENSION* ext =
      X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, const_cast<char*>(san.c_str()));
  if (ext == nullptr) {
    return false;
  }
  X509_add_ext(cert.get(), ext, -1);
  X509_EXTENSION_free(ext);
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    return false;
  }
  auto to_pem = [](auto write) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
    write(bio.get());
    char* data = nullptr;
    long size = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, static_cast<size_t>(size));
  };
  *cert_pem = to_pem([&](BIO* bio) { PEM_write_bio_X509(bio, cert.get()); });
  *key_pem = to_pem(
      [&](BIO* bio) { PEM_write_bio_PrivateKey(bio, key.get(), nullptr, nullptr, 0, nullptr, nullptr); });
  return true;
}

bool MakeTestPki(const std::string& dir, std::string* error) {
  std::string server_ext = std::string("subjectAltName=DNS:localhost,DNS:") + kTestServerName +
                           ",IP:127.0.0.1\\nextendedKeyUsage=serverAuth";
  std::string named_ext =
      std::string("subjectAltName=DNS:") + kTestServerName + "\\nextendedKeyUsage=serverAuth";
  std::string client_ext = "extendedKeyUsage=clientAuth";
  std::string script = "set -e; cd '" + dir + "'; " + Ca("ca") + "; " + Ca("other-ca") + "; " +
                       Leaf("server", "ca", server_ext) + "; " + Leaf("client", "ca", client_ext) +
                       "; " + Leaf("other-client", "other-ca", client_ext) + "; " +
                       Leaf("other-server", "other-ca", server_ext) + "; " +
                       Leaf("named-server", "ca", named_ext);
  return RunScript(script, error);
}

}  // namespace kwd::testing
