#include "controller/admin/admin_server.h"

#include <cpprest/http_listener.h>
#include <pplx/threadpool.h>

#include <algorithm>
#include <charconv>

#include "common/log.h"
#include "common/snapshot_io.h"

namespace kwd::controller_admin {
namespace {

namespace http = web::http;
using http::experimental::listener::http_listener;
using http::experimental::listener::http_listener_config;

constexpr const char kJson[] = "application/json";
constexpr const char kPrometheusText[] = "text/plain; version=0.0.4";
constexpr const char kPlainText[] = "text/plain; charset=utf-8";

void InitializeCpprestThreads(size_t threads) {
  static std::once_flag once;
  std::call_once(once, [&] {
    try {
      crossplat::threadpool::initialize_with_threads(std::max<size_t>(threads, 1));
    } catch (const std::exception& e) {
      Log(LogLevel::kWarn, "admin", "cpprest thread pool already initialised",
          {{"error", e.what()}});
    }
  });
}

http::http_response Text(http::status_code status, std::string body, const char* content_type) {
  http::http_response response(status);
  response.set_body(std::move(body), content_type);
  return response;
}

}  // namespace

void LatestSnapshot::Publish(std::shared_ptr<const compile::CompileResult> result) {
  std::lock_guard lock(mu_);
  latest_ = std::move(result);
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

  void operator()(http::http_request request) {
    http::http_response response;
    try {
      response = Respond(request);
    } catch (const std::exception& e) {
      response = Text(http::status_codes::InternalError,
                      std::string("internal error: ") + e.what() + "\n", kPlainText);
    }
    response.headers().add("Cache-Control", "no-store");
    request.reply(response).then([](pplx::task<void> sent) {
      try {
        sent.get();
      } catch (const std::exception&) {
        // The client went away; nothing to answer.
      }
    });
  }

 private:
  http::http_response Respond(const http::http_request& request) {
    const std::string path = request.relative_uri().path();
    if (request.method() != http::methods::GET && request.method() != http::methods::HEAD) {
      http::http_response response =
          Text(http::status_codes::MethodNotAllowed, "method not allowed\n", kPlainText);
      response.headers().add("Allow", "GET, HEAD");
      return response;
    }
    const AdminHandlers& handlers = server_->handlers_;
    if (path == "/metrics") {
      return Text(http::status_codes::OK, handlers.metrics ? handlers.metrics() : "",
                  kPrometheusText);
    }
    if (path == "/healthz") {
      return Text(http::status_codes::OK, "ok\n", kPlainText);
    }
    if (path == "/readyz") {
      return handlers.ready && handlers.ready()
                 ? Text(http::status_codes::OK, "ready\n", kPlainText)
                 : Text(http::status_codes::ServiceUnavailable,
                        "not ready: initial lists or first compile pending\n", kPlainText);
    }
    if (path == "/debug/snapshot") {
      std::optional<std::string> json = handlers.snapshot ? handlers.snapshot() : std::nullopt;
      if (!json) {
        return Text(http::status_codes::ServiceUnavailable,
                    "{\"error\":\"no snapshot compiled yet\"}\n", kJson);
      }
      return Text(http::status_codes::OK, *json + "\n", kJson);
    }
    if (path == "/debug/objects") {
      std::optional<std::string> json = handlers.objects ? handlers.objects() : std::nullopt;
      if (!json) {
        return Text(http::status_codes::ServiceUnavailable,
                    "{\"error\":\"nothing compiled yet\"}\n", kJson);
      }
      return Text(http::status_codes::OK, *json, kJson);
    }
    return Text(http::status_codes::NotFound, "not found: " + path + "\n", kPlainText);
  }

  AdminServer* server_;
};

AdminServer::AdminServer(AdminOptions options, AdminHandlers handlers)
    : options_(std::move(options)), handlers_(std::move(handlers)) {}

AdminServer::~AdminServer() {
  Stop();
}

bool AdminServer::Start(std::string* error) {
  InitializeCpprestThreads(options_.threads);
  std::string host = options_.host;
  if (host.find(':') != std::string::npos) {
    host = "[" + host + "]";
  }
  std::string uri = "http://" + host + ":" + std::to_string(options_.port);
  try {
    http_listener_config config;
    config.set_timeout(std::chrono::seconds(30));
    auto listener = std::make_unique<http_listener>(uri, config);
    listener->support(Handler(this));
    listener->open().wait();
    listener_ = std::move(listener);
  } catch (const std::exception& e) {
    *error = "cannot listen on " + uri + " (admin): " + e.what();
    return false;
  }
  return true;
}

void AdminServer::Stop() {
  if (listener_ == nullptr) {
    return;
  }
  try {
    listener_->close().wait();
  } catch (const std::exception& e) {
    Log(LogLevel::kWarn, "admin", "closing the admin listener failed", {{"error", e.what()}});
  }
  listener_.reset();
}

}  // namespace kwd::controller_admin
