#pragma once

// Access log in Common Log Format plus group, server, duration and routing
// reason, one line per request:
//   127.0.0.1 - - [30/Nov/2026:10:00:00 +0000] "GET /sap/bc/x?sap-contextid=*** HTTP/1.1" 200 512
//   "erp/public" "erp1_ERP_00" 1.204 balance
// (one line; wrapped here). A request that arrived over TLS has one more
// field at the end: https. Session identifiers and credentials in the target
// are masked (http/access_log_mask.h); headers are not logged. Each worker
// buffers its lines and writes them in batches, so logging costs no system
// call per request.

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

namespace kwd::proxy {

struct AccessLogEntry {
  std::string_view client_ip;
  std::string_view method;
  std::string_view target;
  int version_minor = 1;
  int status = 0;
  uint64_t bytes_sent = 0;  // response body bytes
  std::string_view group;
  std::string_view server;
  double duration_ms = 0;
  std::string_view reason;
  bool https = false;
};

class AccessLog {
 public:
  // fd < 0 disables the log. The fd is not owned.
  explicit AccessLog(int fd) : fd_(fd) { buffer_.reserve(kFlushBytes + 1024); }
  ~AccessLog() { Flush(); }

  bool enabled() const { return fd_ >= 0; }
  void Write(const AccessLogEntry& entry, time_t now);
  void Flush();

 private:
  static constexpr size_t kFlushBytes = 32 * 1024;
  int fd_;
  std::string buffer_;
  time_t cached_second_ = -1;
  char cached_time_[40] = {0};
};

}  // namespace kwd::proxy
