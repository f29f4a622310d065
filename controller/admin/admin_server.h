#pragma once

// The controller's admin port, served like the proxy's (dataplane/admin) by
// the bounded AdminHttpServer (common/admin_http.h) on its own thread:
//   /metrics          Prometheus text format 0.0.4
//   /healthz          200 while the process runs
//   /readyz           200 after the initial lists and the first compile, else 503
//   /debug/snapshot   the current snapshot as JSON (503 before the first one)
//   /debug/objects    each LogonGroup's/UrlMapping's conditions (likewise)
//   /admin, /admin/   a self-contained HTML page over /admin/api/state
//   /admin/api/state  snapshot version and time, connected proxies (this
//                     replica's and the others'), every object with its
//                     conditions, the latest compile's problems (JSON)

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/admin_http.h"
#include "controller/pipeline/pipeline.h"

namespace kwd::controller_admin {

// The snapshot sink behind /debug/snapshot: keeps the latest published result.
class LatestSnapshot final : public pipeline::SnapshotSink {
 public:
  void Publish(std::shared_ptr<const compile::CompileResult> result) override;
  std::shared_ptr<const compile::CompileResult> Get() const;
  // When the latest one was published (epoch before the first).
  std::chrono::system_clock::time_point published_at() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const compile::CompileResult> latest_;
  std::chrono::system_clock::time_point published_at_{};
};

struct AdminHandlers {
  std::function<std::string()> metrics;                  // the exposition text
  std::function<bool()> ready;                           // /readyz
  std::function<std::optional<std::string>()> snapshot;  // JSON, nullopt before the first
  std::function<std::optional<std::string>()> objects;   // /debug/objects JSON, likewise
  std::function<std::string()> state;                    // /admin/api/state JSON
};

struct AdminOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  uint16_t port = 9902;
  AdminHttpLimits limits;  // head, body, connection and time bounds
};

// Splits "HOST:PORT" ("[::1]:9902" for IPv6). False on a malformed address.
bool ParseHostPort(const std::string& text, std::string* host, uint16_t* port);

class AdminServer {
 public:
  AdminServer(AdminOptions options, AdminHandlers handlers);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  bool Start(std::string* error);
  void Stop();
  uint16_t port() const;  // the bound port (the one picked for port 0)

 private:
  class Handler;

  AdminOptions options_;
  AdminHandlers handlers_;
  std::unique_ptr<AdminHttpServer> http_;
};

}  // namespace kwd::controller_admin
