#pragma once

// Starts tests/fake_apiserver/fake_apiserver.py as a child process on
// 127.0.0.1 port 0 and talks to its control API. Header-only so any test
// binary can include it (needs KWD_SOURCE_DIR; KWD_PYTHON3 optional).

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "controller/kube/kube_client.h"

#ifndef KWD_PYTHON3
#define KWD_PYTHON3 "python3"
#endif

namespace kwd::testing {

class FakeApiServer {
 public:
  // Extra command-line flags, e.g. {"--token", "secret"}. With --tls-cert, pass
  // the TLS settings (CA, client certificate) that Config() and the control
  // client should use.
  explicit FakeApiServer(std::vector<std::string> flags = {}, kube::KubeConfig tls = {})
      : tls_(std::move(tls)) {
    int out[2];
    if (pipe(out) != 0) {
      throw std::runtime_error("pipe failed");
    }
    std::string script = std::string(KWD_SOURCE_DIR) + "/tests/fake_apiserver/fake_apiserver.py";
    std::vector<std::string> args = {KWD_PYTHON3, "-u", script};
    args.insert(args.end(), flags.begin(), flags.end());
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      for (auto& arg : args) {
        argv.push_back(arg.data());
      }
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      std::perror("exec python3 (install it: apt-get install python3)");
      _exit(127);
    }
    close(out[1]);
    // The first line is "listening 127.0.0.1:PORT"; a dead child gives EOF.
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') {
      line.push_back(c);
    }
    close(out[0]);
    auto colon = line.rfind(':');
    if (line.rfind("listening ", 0) != 0 || colon == std::string::npos) {
      Stop();
      throw std::runtime_error("fake apiserver did not start: '" + line + "'");
    }
    bool https = std::find(flags.begin(), flags.end(), "--tls-cert") != flags.end();
    address_ = (https ? "https://" : "http://") + line.substr(10);
    control_ = std::make_unique<kube::KubeClient>(Config());
  }

  ~FakeApiServer() { Stop(); }
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  const std::string& address() const { return address_; }

  kube::KubeConfig Config(std::string token = {}) const {
    kube::KubeConfig config = tls_;
    config.server = address_;
    config.token = std::move(token);
    return config;
  }

  // POST /_fake/<what>; throws when the fake rejects it (a broken test).
  nlohmann::json Control(const std::string& what,
                         const nlohmann::json& body = nlohmann::json::object()) {
    kube::ApiResult result = control_->Post("/_fake/" + what, body);
    if (!result.status.ok()) {
      throw std::runtime_error("control " + what + ": " + result.status.ToString());
    }
    return result.body;
  }

  nlohmann::json Upsert(const nlohmann::json& object) {
    return Control("objects", {{"op", "upsert"}, {"object", object}})[0];
  }
  nlohmann::json Remove(const nlohmann::json& object) {
    return Control("objects", {{"op", "delete"}, {"object", object}})[0];
  }
  nlohmann::json Requests() { return control_->Get("/_fake/requests").body; }
  nlohmann::json State() { return control_->Get("/_fake/state").body; }

 private:
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  kube::KubeConfig tls_;
  pid_t pid_ = -1;
  std::string address_;
  std::unique_ptr<kube::KubeClient> control_;
};

}  // namespace kwd::testing
