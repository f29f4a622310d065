#include "controller/admin/admin_server.h"

#include <algorithm>
#include <charconv>

#include "common/log.h"
#include "common/snapshot_io.h"
#include "controller/admin/admin_page.h"

namespace kwd::controller_admin {
namespace {

constexpr const char kJson[] = "application/json";
constexpr const char kPrometheusText[] = "text/plain; version=0.0.4";
constexpr const char kPlainText[] = "text/plain; charset=utf-8";
constexpr const char kHtml[] = "text/html; charset=utf-8";

AdminHttpResponse Text(int status, std::string body, const char* content_type) {
  AdminHttpResponse response;
  response.status = status;
  response.content_type = content_type;
  response.body = std::move(body);
  return response;
}

}  // namespace

void LatestSnapshot::Publish(std::shared_ptr<const compile::CompileResult> result) {
  std::lock_guard lock(mu_);
  latest_ = std::move(result);
  published_at_ = std::chrono::system_clock::now();
}

std::chrono::system_clock::time_point LatestSnapshot::published_at() const {
  std::lock_guard lock(mu_);
  return published_at_;
}

std::shared_ptr<const compile::CompileResult> LatestSnapshot::Get() const {
  std::lock_guard lock(mu_);
  return latest_;
}

bool ParseHostPort(const std::string& text, std::string* host, uint16_t* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) {
    return false;
  }
  std::string address = text.substr(0, colon);
  if (address.front() == '[') {
    if (address.back() != ']' || address.size() < 3) {
      return false;
    }
    address = address.substr(1, address.size() - 2);
  }
  unsigned value = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  auto [end, error] = std::from_chars(first, last, value);
  if (error != std::errc() || end != last || value > 65535) {
    return false;
  }
  *host = address;
  *port = static_cast<uint16_t>(value);
  return true;
}

class AdminServer::Handler {
 public:
  explicit Handler(AdminServer* server) : server_(server) {}

  AdminHttpResponse operator()(const AdminHttpRequest& request) {
    try {
      return Respond(request);
    } catch (const std::exception& e) {
      return Text(500, std::string("internal error: ") + e.what() + "\n", kPlainText);
    }
  }

 private:
  AdminHttpResponse Respond(const AdminHttpRequest& request) {
    const std::string& path = request.path;
    if (request.method != "GET" && request.method != "HEAD") {
      AdminHttpResponse response = Text(405, "method not allowed\n", kPlainText);
      response.headers.emplace_back("Allow", "GET, HEAD");
      return response;
    }
    const AdminHandlers& handlers = server_->handlers_;
    if (path == "/metrics") {
      return Text(200, handlers.metrics ? handlers.metrics() : "", kPrometheusText);
    }
    if (path == "/healthz") {
      return Text(200, "ok\n", kPlainText);
    }
    if (path == "/readyz") {
      return handlers.ready && handlers.ready()
                 ? Text(200, "ready\n", kPlainText)
                 : Text(503, "not ready: initial lists or first compile pending\n", kPlainText);
    }
    if (path == "/debug/snapshot") {
      std::optional<std::string> json = handlers.snapshot ? handlers.snapshot() : std::nullopt;
      if (!json) {
        return Text(503, "{\"error\":\"no snapshot compiled yet\"}\n", kJson);
      }
      return Text(200, *json + "\n", kJson);
    }
    if (path == "/admin" || path == "/admin/") {
      return Text(200, std::string(kControllerAdminPage), kHtml);
    }
    if (path == "/admin/api/state") {
      if (!handlers.state) {
        return Text(503, "{\"error\":\"no state\"}\n", kJson);
      }
      return Text(200, handlers.state(), kJson);
    }
    if (path == "/debug/objects") {
      std::optional<std::string> json = handlers.objects ? handlers.objects() : std::nullopt;
      if (!json) {
        return Text(503, "{\"error\":\"nothing compiled yet\"}\n", kJson);
      }
      return Text(200, *json, kJson);
    }
    return Text(404, "not found: " + path + "\n", kPlainText);
  }

  AdminServer* server_;
};

AdminServer::AdminServer(AdminOptions options, AdminHandlers handlers)
    : options_(std::move(options)), handlers_(std::move(handlers)) {}

AdminServer::~AdminServer() {
  Stop();
}

bool AdminServer::Start(std::string* error) {
  std::string host = options_.host;
  if (host.find(':') != std::string::npos) {
    host = "[" + host + "]";
  }
  std::string uri = "http://" + host + ":" + std::to_string(options_.port);
  auto server = std::make_unique<AdminHttpServer>(options_.limits, Handler(this));
  std::string detail;
  if (!server->Start(options_.host, options_.port, &detail)) {
    *error = "cannot listen on " + uri + " (admin): " + detail;
    return false;
  }
  http_ = std::move(server);
  return true;
}

void AdminServer::Stop() {
  if (http_ == nullptr) {
    return;
  }
  http_->Stop();
  http_.reset();
}

uint16_t AdminServer::port() const {
  return http_ != nullptr ? http_->port() : 0;
}

}  // namespace kwd::controller_admin
