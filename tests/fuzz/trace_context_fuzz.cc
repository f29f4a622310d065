// Fuzzes what the proxy takes from client headers for its logs and the
// upstream (dataplane/proxy/request_id.h): TraceIdFromTraceparent and
// ValidRequestId over arbitrary header values, then the JSON and text access
// log lines made from them. A trace id is 32 lowercase hex digits inside the
// value; a kept request id has no byte that could break a log line or a
// header; every JSON line is one line. Any violation aborts.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dataplane/proxy/access_log.h"
#include "dataplane/proxy/request_id.h"

namespace {

void Check(bool condition) {
  if (!condition) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view trace_id = kwd::proxy::TraceIdFromTraceparent(input);
  if (!trace_id.empty()) {
    Check(trace_id.size() == 32);
    Check(trace_id.data() >= input.data() && trace_id.data() + 32 <= input.data() + input.size());
    Check(trace_id.find_first_not_of("0123456789abcdef") == std::string_view::npos);
    Check(trace_id.find_first_not_of('0') != std::string_view::npos);
  }
  if (kwd::proxy::ValidRequestId(input)) {
    Check(!input.empty() && input.size() <= 128);
    for (char c : input) {
      auto byte = static_cast<unsigned char>(c);
      Check(byte > 0x20 && byte < 0x7f && c != '"' && c != '\\');
    }
  }
  // The value as target, request id and trace id of an access log line in
  // both formats: every line ends with its only newline.
  int fds[2];
  if (::pipe(fds) != 0) {
    return 0;
  }
  for (kwd::LogFormat format : {kwd::LogFormat::kText, kwd::LogFormat::kJson}) {
    kwd::proxy::AccessLog log(fds[1], format);
    kwd::proxy::AccessLogEntry entry;
    entry.method = "GET";
    entry.target = input.substr(0, 2048);
    entry.request_id = input.substr(0, 2048);
    entry.trace_id = trace_id;
    entry.reason = "balance";
    log.Write(entry, 0);
    log.Flush();
    std::string line;
    char buf[65536];
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    Check(n > 0);
    line.assign(buf, static_cast<size_t>(n));
    Check(line.find('\n') == line.size() - 1);
    if (format == kwd::LogFormat::kJson) {
      Check(line.front() == '{' && line.substr(line.size() - 2) == "}\n");
      for (char c : line.substr(0, line.size() - 1)) {
        Check(static_cast<unsigned char>(c) >= 0x20);
      }
    }
  }
  ::close(fds[0]);
  ::close(fds[1]);
  return 0;
}
