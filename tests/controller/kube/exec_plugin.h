#pragma once

// Test support for kubeconfig exec credential plugins: a temporary directory
// holding small /bin/sh plugins that the tests write, and a kubeconfig that
// names one of them.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kwd::testing {

class PluginDir {
 public:
  PluginDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kwd-exec-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~PluginDir() { std::filesystem::remove_all(path_); }
  PluginDir(const PluginDir&) = delete;
  PluginDir& operator=(const PluginDir&) = delete;

  const std::string& path() const { return path_; }

  std::string Write(const std::string& name, const std::string& contents) const {
    std::string file = path_ + "/" + name;
    std::ofstream(file, std::ios::trunc) << contents;
    return file;
  }

  // A /bin/sh plugin: every run appends "run <args>" to <name>.calls and
  // stores its KUBERNETES_EXEC_INFO in <name>.info before `body` runs.
  std::string WritePlugin(const std::string& name, const std::string& body) const {
    std::string file = Write(name,
                             "#!/bin/sh\n"
                             "echo \"run $*\" >> \"$0.calls\"\n"
                             "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$0.info\"\n" +
                                 body);
    chmod(file.c_str(), 0755);
    return file;
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(path_ + "/" + name);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }

  // How often plugin `name` ran.
  int Runs(const std::string& name) const {
    std::string calls = Read(name + ".calls");
    int lines = 0;
    for (char c : calls) {
      lines += c == '\n' ? 1 : 0;
    }
    return lines;
  }

 private:
  std::string path_;
};

// A plugin body that prints a v1 ExecCredential with the token held in the
// file <name>.token next to it (and the expiry in <name>.expiry, if any).
inline std::string TokenFromFileBody(const std::string& api_version = "v1") {
  return "token=$(cat \"$0.token\")\n"
         "expiry=$(cat \"$0.expiry\" 2>/dev/null)\n"
         "if [ -n \"$expiry\" ]; then expiry=\",\\\"expirationTimestamp\\\":\\\"$expiry\\\"\"; fi\n"
         "printf '{\"apiVersion\":\"client.authentication.k8s.io/" +
         api_version +
         "\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"%s}}\\n' \"$token\" "
         "\"$expiry\"\n";
}

// A kubeconfig with one context whose user runs an exec plugin.
inline std::string ExecKubeConfig(const std::string& server, const std::string& exec_lines,
                                  const std::string& cluster_lines = {}) {
  return "apiVersion: v1\nkind: Config\ncurrent-context: main\n"
         "contexts:\n- name: main\n  context: {cluster: c1, user: eks-admin}\n"
         "clusters:\n- name: c1\n  cluster:\n    server: " +
         server + "\n" + cluster_lines + "users:\n- name: eks-admin\n  user:\n    exec:\n" +
         exec_lines;
}

}  // namespace kwd::testing
