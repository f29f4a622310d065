#include "tests/support/test_pki.h"

#include <cstdio>
#include <cstdlib>

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
