#include "dataplane/proxy/access_log.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
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

void AppendToken(std::string_view value, std::string& out) {
  if (value.empty()) {
    out += '-';
    return;
  }
  for (char c : value) {
    out += (c == '"' || c == ' ' || static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) ? '?' : c;
  }
}

// A JSON string, or null when empty.
void AppendJsonOrNull(std::string_view value, std::string& out) {
  if (value.empty()) {
    out += "null";
  } else {
    AppendJsonString(value, out);
  }
}

void AppendMs(double ms, std::string& out) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", ms);
  out += text;
}

std::string_view Protocol(const AccessLogEntry& e) {
  if (!e.protocol.empty()) {
    return e.protocol;
  }
  return e.version_minor == 0 ? "HTTP/1.0" : "HTTP/1.1";
}

}  // namespace

void AccessLog::WriteJson(const AccessLogEntry& e) {
  auto now = std::chrono::system_clock::now();
  time_t secs = std::chrono::system_clock::to_time_t(now);
  auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[48];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  std::string& out = buffer_;
  out += "{\"ts\":\"";
  out += ts;
  out += "\",\"client_ip\":";
  AppendJsonOrNull(e.client_ip, out);
  out += ",\"method\":";
  AppendJsonOrNull(e.method, out);
  out += ",\"target\":";
  scratch_.clear();
  http::AppendMaskedTarget(e.target, scratch_);
  AppendJsonOrNull(scratch_, out);
  out += ",\"protocol\":\"";
  out += Protocol(e);
  out += "\",\"status\":";
  out += std::to_string(e.status);
  out += ",\"bytes_sent\":";
  out += std::to_string(e.bytes_sent);
  out += ",\"bytes_received\":";
  out += std::to_string(e.bytes_received);
  out += ",\"group\":";
  AppendJsonOrNull(e.group, out);
  out += ",\"server\":";
  AppendJsonOrNull(e.server, out);
  out += ",\"duration_ms\":";
  AppendMs(e.duration_ms, out);
  out += ",\"upstream_ms\":";
  if (e.upstream_ms < 0) {
    out += "null";
  } else {
    AppendMs(e.upstream_ms, out);
  }
  out += ",\"reason\":";
  AppendJsonOrNull(e.reason, out);
  out += ",\"request_id\":";
  AppendJsonOrNull(e.request_id, out);
  out += ",\"trace_id\":";
  AppendJsonOrNull(e.trace_id, out);
  out += ",\"tls_version\":";
  AppendJsonOrNull(e.tls_version, out);
  out += "}\n";
}

void AccessLog::Write(const AccessLogEntry& e, time_t now) {
  if (fd_ < 0) {
    return;
  }
  if (buffer_.empty() && on_first_line_ != nullptr) {
    on_first_line_(on_first_line_owner_);
  }
  if (format_ == LogFormat::kJson) {
    WriteJson(e);
    if (buffer_.size() >= kFlushBytes) {
      Flush();
    }
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
  if (e.method.empty() && e.target.empty()) {
    out += '-';  // rejected before a request line was parsed (Common Log Format)
  } else {
    out += e.method.empty() ? std::string_view("-") : e.method;
    out += ' ';
    http::AppendMaskedTarget(e.target, out);
    out += ' ';
    out += Protocol(e);
  }
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
  out += ' ';
  AppendMs(e.duration_ms, out);
  out += ' ';
  out += e.reason.empty() ? std::string_view("-") : e.reason;
  out += ' ';
  if (e.upstream_ms < 0) {
    out += '-';
  } else {
    AppendMs(e.upstream_ms, out);
  }
  out += ' ';
  AppendToken(e.request_id, out);
  out += ' ';
  AppendToken(e.trace_id, out);
  out += ' ';
  AppendToken(e.tls_version, out);
  out += '\n';
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
