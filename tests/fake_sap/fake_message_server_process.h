#pragma once

// Starts tests/fake_sap/fake_message_server.py on 127.0.0.1 (an ephemeral
// port) and drives its control API. Header-only; needs KWD_SOURCE_DIR and
// tests/support (Process, HttpClient); KWD_PYTHON3 optional.

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/process.h"

#ifndef KWD_PYTHON3
#define KWD_PYTHON3 "python3"
#endif

namespace kwd::testing {

class FakeMessageServer {
 public:
  // `args`: more command-line arguments (--tls-cert PEM --tls-key PEM).
  explicit FakeMessageServer(const nlohmann::json& state = nlohmann::json::object(),
                             std::string log_path = {}, std::vector<std::string> args = {})
      : process_(std::make_unique<Process>(Command(std::move(args)), std::move(log_path))) {
    if (!process_->started()) {
      throw std::runtime_error("fake message server did not start: " + process_->Log());
    }
    if (!state.empty()) {
      Set(state);
    }
  }

  uint16_t port() const { return process_->port(); }

  // Merges `update` into the fake's state; returns the new state (with "ports").
  nlohmann::json Set(const nlohmann::json& update) {
    std::string body = update.dump();
    HttpClient client(port());
    HttpReply reply = client.Request("POST /_fake/state HTTP/1.1\r\nHost: fake\r\nContent-Length: " +
                                     std::to_string(body.size()) + "\r\n\r\n" + body);
    if (reply.status != 200) {
      throw std::runtime_error("fake message server: " + std::to_string(reply.status) + " " +
                               reply.body);
    }
    return nlohmann::json::parse(reply.body);
  }
  nlohmann::json State() { return nlohmann::json::parse(HttpGet(port(), "/_fake/state").body); }
  // The application server port of instance `name` (one with "serve": true).
  uint16_t AppPort(const std::string& name) {
    return static_cast<uint16_t>(State()["ports"].value(name, 0));
  }
  // The HTTPS port of the message server (started with --tls-cert).
  uint16_t TlsPort() { return static_cast<uint16_t>(State().value("tls_port", 0)); }
  // What the application servers were asked: [{"instance", "scheme", "path"}].
  nlohmann::json AppRequests() {
    return nlohmann::json::parse(HttpGet(port(), "/_fake/app_requests").body);
  }
  // Requests for the server list so far.
  std::size_t ListRequests() {
    return nlohmann::json::parse(HttpGet(port(), "/_fake/requests").body).size();
  }

 private:
  static std::vector<std::string> Command(std::vector<std::string> args) {
    std::vector<std::string> command{
        KWD_PYTHON3, "-u", std::string(KWD_SOURCE_DIR) + "/tests/fake_sap/fake_message_server.py"};
    command.insert(command.end(), args.begin(), args.end());
    return command;
  }

  std::unique_ptr<Process> process_;
};

}  // namespace kwd::testing
