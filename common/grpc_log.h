#pragma once

// gRPC core's own log lines (gpr_log) in the project's log format, so that a
// refused TLS handshake on the snapshot port reads like every other line:
//   level=error component=grpc msg="TLS handshake failed" error="...peer did not return a
//   certificate."
// Header-only: only code that links gRPC includes it.

#include <grpc/support/log.h>

#include <string_view>

#include "common/log.h"

namespace kwd {

inline void RouteGrpcLogsToKwdLog() {
  gpr_set_log_function([](gpr_log_func_args* args) {
    std::string_view message = args->message != nullptr ? args->message : "";
    LogLevel level = args->severity == GPR_LOG_SEVERITY_ERROR  ? LogLevel::kError
                     : args->severity == GPR_LOG_SEVERITY_INFO ? LogLevel::kInfo
                                                               : LogLevel::kDebug;
    if (message.find("Handshake failed") != std::string_view::npos) {
      Log(level, "grpc", "TLS handshake failed", {{"error", message}});
      return;
    }
    std::string_view file = args->file != nullptr ? args->file : "";
    Log(level, "grpc", message, {{"source", file.substr(file.rfind('/') + 1)}});
  });
}

}  // namespace kwd
