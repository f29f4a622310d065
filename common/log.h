#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace kwd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

using LogField = std::pair<std::string_view, std::string_view>;

enum class LogFormat { kText, kJson };

// Structured log lines on stderr, logfmt style (LogFormat::kText, the default):
//   ts=2026-11-30T10:00:00.123Z level=info component=compile msg="..." key=value
// or one JSON object per line (LogFormat::kJson):
//   {"ts":"2026-11-30T10:00:00.123Z","level":"info","component":"compile","msg":"...","key":"value"}
// Thread-safe; one write(2) per line.
void Log(LogLevel level, std::string_view component, std::string_view message,
         std::initializer_list<LogField> fields = {});
void SetLogLevel(LogLevel level);
void SetLogFormat(LogFormat format);
LogFormat CurrentLogFormat();
// "text" or "json" (the --log-format flag of both binaries).
bool ParseLogFormat(std::string_view name, LogFormat* out);
// Appends `text` as a JSON string with its quotes: ", \ and control
// characters escaped; bytes that are not UTF-8 become the text \xNN, so the
// line is always valid JSON.
void AppendJsonString(std::string_view text, std::string& out);
// `text` with each control character (below 0x20, and 0x7f) written as \r,
// \n, \t or \xNN; everything else as is. For texts that quote names from
// objects or clients (condition messages, snapshot problems).
std::string EscapeControlCharacters(std::string_view text);
// Appends the escape of control character `c` (see above).
void AppendControlEscape(char c, std::string& out);
bool ParseLogLevel(std::string_view name, LogLevel* out);

}  // namespace kwd
