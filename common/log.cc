#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string>

#include "common/metrics.h"

namespace kwd {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

bool IsControl(char c) {
  return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
}

// logfmt: a value with a space, quote, '=' or control character is quoted,
// with \" \\ and control characters escaped (AppendControlEscape).
void AppendValue(std::string& out, std::string_view value) {
  bool quote = value.empty();
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || IsControl(c)) {
      quote = true;
      break;
    }
  }
  if (!quote) {
    out += value;
    return;
  }
  out += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (IsControl(c)) {
      AppendControlEscape(c, out);
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

void AppendControlEscape(char c, std::string& out) {
  switch (c) {
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      auto byte = static_cast<unsigned char>(c);
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
}

std::string EscapeControlCharacters(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (IsControl(c)) {
      AppendControlEscape(c, out);
    } else {
      out += c;
    }
  }
  return out;
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

void SetLogFormat(LogFormat format) { g_format.store(static_cast<int>(format)); }

LogFormat CurrentLogFormat() {
  return static_cast<LogFormat>(g_format.load(std::memory_order_relaxed));
}

bool ParseLogFormat(std::string_view name, LogFormat* out) {
  if (name == "text") {
    *out = LogFormat::kText;
  } else if (name == "json") {
    *out = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

void AppendJsonString(std::string_view text, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x80) {
      size_t length = Utf8SequenceLength(text.substr(i));
      if (length > 0) {
        out.append(text.substr(i, length));
        i += length;
      } else {
        out += "\\\\x";  // the text \xNN: JSON has no \x escape
        out += kHex[byte >> 4];
        out += kHex[byte & 0xf];
        ++i;
      }
      continue;
    }
    switch (byte) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (byte < 0x20 || byte == 0x7f) {
          out += "\\u00";
          out += kHex[byte >> 4];
          out += kHex[byte & 0xf];
        } else {
          out += static_cast<char>(byte);
        }
    }
    ++i;
  }
  out += '"';
}

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (name == LevelName(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

void Log(LogLevel level, std::string_view component, std::string_view message,
         std::initializer_list<LogField> fields) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) {
    return;
  }
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[96];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  std::string line;
  line.reserve(128);
  if (CurrentLogFormat() == LogFormat::kJson) {
    line += "{\"ts\":\"";
    line += ts;
    line += "\",\"level\":\"";
    line += LevelName(level);
    line += "\",\"component\":";
    AppendJsonString(component, line);
    line += ",\"msg\":";
    AppendJsonString(message, line);
    for (const auto& [key, value] : fields) {
      line += ',';
      AppendJsonString(key, line);
      line += ':';
      AppendJsonString(value, line);
    }
    line += "}\n";
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
    return;
  }
  line += "ts=";
  line += ts;
  line += " level=";
  line += LevelName(level);
  line += " component=";
  AppendValue(line, component);
  line += " msg=";
  AppendValue(line, message);
  for (const auto& [key, value] : fields) {
    line += ' ';
    line += key;
    line += '=';
    AppendValue(line, value);
  }
  line += '\n';
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace kwd
