#include "dataplane/proxy/access_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "dataplane/http/access_log_mask.h"

namespace kwd::proxy {

namespace {

void AppendQuoted(std::string_view value, std::string& out) {
  out += '"';
  if (value.empty()) {
    out += '-';
  }
  for (char c : value) {
    out += (c == '"' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  out += '"';
}

}  // namespace

void AccessLog::Write(const AccessLogEntry& e, time_t now) {
  if (fd_ < 0) {
    return;
  }
  if (now != cached_second_) {
    cached_second_ = now;
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(cached_time_, sizeof cached_time_, "[%d/%b/%Y:%H:%M:%S +0000]", &tm);
  }
  std::string& out = buffer_;
  out += e.client_ip.empty() ? std::string_view("-") : e.client_ip;
  out += " - - ";
  out += cached_time_;
  out += " \"";
  size_t line_start = out.size();
  out += e.method;
  out += ' ';
  http::AppendMaskedTarget(e.target, out);
  out += e.version_minor == 0 ? " HTTP/1.0" : " HTTP/1.1";
  // The request line came from the client: no quotes or controls in the log.
  for (size_t i = line_start; i < out.size(); ++i) {
    if (out[i] == '"' || static_cast<unsigned char>(out[i]) < 0x20 || out[i] == 0x7f) {
      out[i] = '?';
    }
  }
  out += "\" ";
  out += std::to_string(e.status);
  out += ' ';
  out += e.bytes_sent == 0 ? std::string("-") : std::to_string(e.bytes_sent);
  out += ' ';
  AppendQuoted(e.group, out);
  out += ' ';
  AppendQuoted(e.server, out);
  char duration[32];
  std::snprintf(duration, sizeof duration, " %.3f ", e.duration_ms);
  out += duration;
  out += e.reason.empty() ? std::string_view("-") : e.reason;
  out += e.https ? " https\n" : "\n";
  if (out.size() >= kFlushBytes) {
    Flush();
  }
}

void AccessLog::Flush() {
  size_t off = 0;
  while (fd_ >= 0 && off < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + off, buffer_.size() - off);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;  // a full disk or closed pipe drops log lines, never requests
    }
    off += static_cast<size_t>(n);
  }
  buffer_.clear();
}

}  // namespace kwd::proxy
