#pragma once

// Responses the proxy makes itself. They name the reason the SAP way
// (ICM error codes: EDISPATCHERR when no server is available, EPERM when the
// permission table denies, ETIMEOUT, EPROTERROR for malformed requests...),
// as a short HTML page or as JSON when the client asks for
// application/json.

#include <string>
#include <string_view>

namespace kwd::proxy {

enum class ErrorCode {
  kBadRequest,       // 400 EPROTERROR
  kDenied,           // 403 EPERM
  kSecureOnly,       // 403 EPERM: a secure-only URL over plain http
  kNotFound,         // 404 ENOTFOUND (admin paths only)
  kTargetTooLong,    // 414 EPROTERROR
  kBodyTooLarge,     // 413 EPROTERROR (icm/HTTP/max_request_size_KB)
  kHeadersTooLarge,  // 431 EPROTERROR
  kNotImplemented,   // 501 EPROTERROR
  kBadGateway,       // 502 EPROTERROR from the upstream / connection failed
  kNoServer,         // 503 EDISPATCHERR
  kRequestTimeout,   // 408 ETIMEOUT (client too slow)
  kGatewayTimeout,   // 504 ETIMEOUT (upstream too slow)
  kVersion,          // 505 EPROTERROR
};
// The number of ErrorCode values (kVersion is the last).
inline constexpr size_t kErrorCodeCount = static_cast<size_t>(ErrorCode::kVersion) + 1;

struct ErrorInfo {
  int status;
  std::string_view reason_phrase;
  std::string_view sap_code;
};

ErrorInfo ErrorInfoFor(ErrorCode code);
// Maps a parser's HTTP status to the matching error code.
ErrorCode ErrorCodeForStatus(int status);

// Appends a complete HTTP/1.1 response to `out`. `detail` is a one-line
// explanation safe to show to clients (no request data is echoed).
// `close` adds "Connection: close".
void AppendErrorResponse(ErrorCode code, std::string_view detail, bool json, bool close,
                         bool head_request, std::string* out);

// Appends a redirect (301 Moved Permanently, 308 Permanent Redirect, ...)
// to `location`, which the caller made safe to send (routing/
// secure_redirect.h). No body: nothing of the request is echoed.
void AppendRedirectResponse(int status, std::string_view location, std::string* out);

}  // namespace kwd::proxy
