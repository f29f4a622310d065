#pragma once

// What the end-to-end distribution tests share: a temporary directory, demo
// backends, a real kwd-controller serving its snapshot port and real kwd-proxy
// processes that take their snapshots from it, all on loopback, plus the
// configuration files the controller reads.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/process.h"

namespace kwd::testing {

// The version of the snapshot the controller serves ("" while it has none).
inline std::string ControllerVersion(uint16_t admin_port) {
  auto reply = HttpGet(admin_port, "/debug/snapshot");
  if (reply.status != 200) {
    return "";
  }
  auto json = nlohmann::json::parse(reply.body, nullptr, false);
  return json.is_object() ? json.value("version", "") : "";
}

// One static server of a LogonGroup (no capacity line when unset).
struct StaticServer {
  std::string name;
  uint16_t port;
  std::optional<int> capacity = 1;
};

// The abap LogonGroup `name` in namespace erp, one YAML document.
inline std::string LogonGroupYaml(const std::string& name,
                                  const std::vector<StaticServer>& servers) {
  std::string yaml =
      "apiVersion: dispatch.kwd.io/v1alpha1\n"
      "kind: LogonGroup\n"
      "metadata: {name: " +
      name +
      ", namespace: erp}\n"
      "spec:\n"
      "  kind: abap\n"
      "  backend:\n"
      "    staticServers:\n";
  for (const StaticServer& server : servers) {
    yaml += "      - {name: " + server.name +
            ", address: 127.0.0.1, port: " + std::to_string(server.port);
    if (server.capacity) {
      yaml += ", capacity: " + std::to_string(*server.capacity);
    }
    yaml += "}\n";
  }
  return yaml;
}

// The UrlMapping erp: everything (and /sap/) to the LogonGroup public.
inline std::string ErpUrlMappingYaml() {
  return "apiVersion: dispatch.kwd.io/v1alpha1\n"
         "kind: UrlMapping\n"
         "metadata: {name: erp, namespace: erp}\n"
         "spec:\n"
         "  hosts: []\n"
         "  defaultRootHandler: abap\n"
         "  defaultGroups: {abap: public, java: public}\n"
         "  rules:\n"
         "    - {prefix: /sap/, kind: abap, logonGroup: public}\n";
}

class ClusterTest : public ::testing::Test {
 protected:
  struct ProxyProcess {
    std::unique_ptr<Process> process;
    uint16_t admin = 0;
  };

  ClusterTest() { proxies_.reserve(8); }  // StartProxy hands out references

  void TearDown() override {
    proxies_.clear();
    controller_.reset();
    backends_.clear();
    if (!dir_.empty()) {
      std::filesystem::remove_all(dir_);
    }
  }

  // dir_ = a fresh /tmp/PREFIX-XXXXXX.
  void MakeDir(const std::string& prefix) {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  // An abap kwd-demo-backend called `instance`, on a free port.
  void StartBackend(const std::string& instance) {
    backends_.push_back(std::make_unique<Process>(
        std::vector<std::string>{BinaryPath("kwd-demo-backend"), "--listen", "127.0.0.1:0",
                                 "--instance", instance, "--kind", "abap"}));
    ASSERT_TRUE(backends_.back()->started());
  }

  // Runs `argv` as the controller (stderr to controller.log) and waits until
  // it serves a snapshot on controller_admin_.
  void StartControllerWith(std::vector<std::string> argv) {
    controller_ = std::make_unique<Process>(std::move(argv), (dir_ / "controller.log").string());
    ASSERT_TRUE(controller_->started());
    ASSERT_TRUE(WaitFor([&] { return !ControllerVersion(controller_admin_).empty(); }));
  }

  // kwd-proxy serve taking its snapshots from the controller at grpc_port_.
  std::vector<std::string> ProxyArgs(const std::string& node, uint16_t admin) const {
    return {BinaryPath("kwd-proxy"),
            "serve",
            "--controller",
            "127.0.0.1:" + std::to_string(grpc_port_),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:" + std::to_string(admin),
            "--node-id",
            node,
            "--access-log",
            "off"};
  }

  // Runs `argv` (from ProxyArgs for `node` and `admin`), stderr to NODE.log.
  ProxyProcess& StartProxyWith(const std::string& node, uint16_t admin,
                               std::vector<std::string> argv) {
    ProxyProcess proxy;
    proxy.admin = admin;
    proxy.process = std::make_unique<Process>(std::move(argv), (dir_ / (node + ".log")).string());
    EXPECT_TRUE(proxy.process->started());
    proxies_.push_back(std::move(proxy));
    return proxies_.back();
  }

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<Process>> backends_;
  std::unique_ptr<Process> controller_;
  std::vector<ProxyProcess> proxies_;
  uint16_t grpc_port_ = 0;
  uint16_t controller_admin_ = 0;
};

}  // namespace kwd::testing
