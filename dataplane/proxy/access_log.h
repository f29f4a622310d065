#pragma once

// Access log in Common Log Format plus group, server, duration and routing
// reason, one line per request:
//   127.0.0.1 - - [30/Nov/2026:10:00:00 +0000] "GET /sap/bc/x?sap-contextid=*** HTTP/1.1" 200 512
//   "erp/public" "erp1_ERP_00" 1.204 balance
// (one line; wrapped here), then the upstream time in ms ("-" when no server
// answered), the request id, the trace id and the client connection's TLS
// version ("-" when none). With
// LogFormat::kJson (--log-format json) each line is a JSON object instead:
//   {"ts":"2026-11-30T10:00:00.123Z","client_ip":"127.0.0.1","method":"GET",
//    "target":"/sap/bc/x?sap-contextid=***","protocol":"HTTP/1.1","status":200,
//    "bytes_sent":512,"bytes_received":0,"group":"erp/public",
//    "server":"erp1_ERP_00","duration_ms":1.204,"upstream_ms":1.1,
//    "reason":"balance","request_id":"...","trace_id":null,"tls_version":null}
// (absent values are null). Session identifiers and credentials in the target
// are masked (http/access_log_mask.h); headers are not logged. Each worker
// buffers its lines and writes them in batches, so logging costs no system
// call per request.

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include "common/log.h"

namespace kwd::proxy {

struct AccessLogEntry {
  std::string_view client_ip;
  std::string_view method;
  std::string_view target;
  int version_minor = 1;
  std::string_view protocol;  // "" : HTTP/1.x by version_minor; else as given ("passthrough")
  int status = 0;
  // Response body bytes the proxy passed on to the client's connection by
  // the time the line is written: when the response ended (the server's
  // last byte, or the abort). Not a count of what reached the client: the
  // tail (up to the connection's buffer, 64 KiB, plus the batched-send
  // queue, 64 KiB) may still be on its way then, and a client that goes
  // away later does not change the line (its connection is reset, so the
  // client sees the response cut short).
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;  // request body bytes
  std::string_view group;
  std::string_view server;
  double duration_ms = 0;
  double upstream_ms = -1;  // connect to the server until the log; < 0: no server
  std::string_view reason;
  std::string_view request_id;
  std::string_view trace_id;  // from traceparent; empty: none
  // The client connection's TLS version ("TLSv1.3"); empty for plain HTTP.
  std::string_view tls_version;
};

class AccessLog {
 public:
  // fd < 0 disables the log. The fd is not owned. The format follows the
  // process's --log-format unless given.
  explicit AccessLog(int fd, LogFormat format = CurrentLogFormat()) : fd_(fd), format_(format) {
    buffer_.reserve(kFlushBytes + 1024);
  }
  ~AccessLog() { Flush(); }

  bool enabled() const { return fd_ >= 0; }
  void Write(const AccessLogEntry& entry, time_t now);
  void Flush();
  // Called when a line goes into an empty buffer (the owner's flush timer
  // may be sleeping).
  void OnFirstLine(void (*callback)(void* owner), void* owner) {
    on_first_line_ = callback;
    on_first_line_owner_ = owner;
  }

 private:
  void WriteJson(const AccessLogEntry& entry);

  static constexpr size_t kFlushBytes = 32 * 1024;
  int fd_;
  LogFormat format_;
  std::string scratch_;
  std::string buffer_;
  void (*on_first_line_)(void* owner) = nullptr;
  void* on_first_line_owner_ = nullptr;
  time_t cached_second_ = -1;
  char cached_time_[40] = {0};
};

}  // namespace kwd::proxy
