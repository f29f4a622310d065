#pragma once

// A small HTTP/1.1 server that behaves like an SAP application server
// instance for demos and black-box tests: health pings, session cookies that
// name the instance, an echo endpoint, a slow endpoint and a WebSocket echo.
// Thread per connection: it is a test fixture, not a data plane.

#include <cstdint>
#include <string>

namespace kwd::demo {

struct BackendOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;   // 0: any free port (printed on stdout)
  std::string instance;       // SAP instance name, e.g. erp1_ERP_00
  std::string kind = "abap";  // abap | java
};

// Parses --listen HOST:PORT --instance NAME [--kind abap|java].
bool ParseBackendArgs(int argc, char** argv, BackendOptions* options, std::string* error);

// Binds, prints "listening HOST:PORT" on stdout, serves until killed.
// Returns non-zero when it cannot listen.
int RunBackend(const BackendOptions& options);

}  // namespace kwd::demo
