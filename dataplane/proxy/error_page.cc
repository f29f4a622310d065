#include "dataplane/proxy/error_page.h"

namespace kwd::proxy {

ErrorInfo ErrorInfoFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadRequest:
      return {400, "Bad Request", "EPROTERROR"};
    case ErrorCode::kDenied:
      return {403, "Forbidden", "EPERM"};
    case ErrorCode::kSecureOnly:
      return {403, "Forbidden", "EPERM"};
    case ErrorCode::kNotFound:
      return {404, "Not Found", "ENOTFOUND"};
    case ErrorCode::kRequestTimeout:
      return {408, "Request Timeout", "ETIMEOUT"};
    case ErrorCode::kBodyTooLarge:
      return {413, "Content Too Large", "EPROTERROR"};
    case ErrorCode::kTargetTooLong:
      return {414, "URI Too Long", "EPROTERROR"};
    case ErrorCode::kHeadersTooLarge:
      return {431, "Request Header Fields Too Large", "EPROTERROR"};
    case ErrorCode::kNotImplemented:
      return {501, "Not Implemented", "EPROTERROR"};
    case ErrorCode::kBadGateway:
      return {502, "Bad Gateway", "EPROTERROR"};
    case ErrorCode::kNoServer:
      return {503, "Service Unavailable", "EDISPATCHERR"};
    case ErrorCode::kGatewayTimeout:
      return {504, "Gateway Timeout", "ETIMEOUT"};
    case ErrorCode::kVersion:
      return {505, "HTTP Version Not Supported", "EPROTERROR"};
  }
  return {500, "Internal Server Error", "EINTERN"};
}

ErrorCode ErrorCodeForStatus(int status) {
  switch (status) {
    case 403:
      return ErrorCode::kDenied;
    case 404:
      return ErrorCode::kNotFound;
    case 408:
      return ErrorCode::kRequestTimeout;
    case 413:
      return ErrorCode::kBodyTooLarge;
    case 414:
      return ErrorCode::kTargetTooLong;
    case 431:
      return ErrorCode::kHeadersTooLarge;
    case 501:
      return ErrorCode::kNotImplemented;
    case 502:
      return ErrorCode::kBadGateway;
    case 503:
      return ErrorCode::kNoServer;
    case 504:
      return ErrorCode::kGatewayTimeout;
    case 505:
      return ErrorCode::kVersion;
    default:
      return ErrorCode::kBadRequest;
  }
}

namespace {

void AppendEscaped(std::string_view text, bool json, std::string* out) {
  for (char c : text) {
    if (json && (c == '"' || c == '\\')) {
      *out += '\\';
      *out += c;
    } else if (!json && c == '<') {
      *out += "&lt;";
    } else if (!json && c == '>') {
      *out += "&gt;";
    } else if (!json && c == '&') {
      *out += "&amp;";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      *out += ' ';
    } else {
      *out += c;
    }
  }
}

}  // namespace

void AppendErrorResponse(ErrorCode code, std::string_view detail, bool json, bool close,
                         bool head_request, std::string* out) {
  ErrorInfo info = ErrorInfoFor(code);
  std::string body;
  body.reserve(256);
  if (json) {
    body += "{\"status\":";
    body += std::to_string(info.status);
    body += ",\"error\":\"";
    body += info.sap_code;
    body += "\",\"message\":\"";
    AppendEscaped(detail, true, &body);
    body += "\",\"server\":\"kwd\"}\n";
  } else {
    body += "<!DOCTYPE html>\n<html><head><title>";
    body += std::to_string(info.status);
    body += ' ';
    body += info.reason_phrase;
    body += "</title></head>\n<body><h1>";
    body += std::to_string(info.status);
    body += ' ';
    body += info.reason_phrase;
    body += "</h1>\n<p>";
    AppendEscaped(detail, false, &body);
    body += "</p>\n<p>Error: ";
    body += info.sap_code;
    body += "<br>Server: kwd (Kubernetes Web Dispatcher)</p></body></html>\n";
  }
  *out += "HTTP/1.1 ";
  *out += std::to_string(info.status);
  *out += ' ';
  *out += info.reason_phrase;
  *out += "\r\nContent-Type: ";
  *out += json ? "application/json" : "text/html; charset=utf-8";
  *out += "\r\nContent-Length: ";
  *out += std::to_string(body.size());
  *out += "\r\nCache-Control: no-store\r\nX-Kwd-Error: ";
  *out += info.sap_code;
  if (close) {
    *out += "\r\nConnection: close";
  }
  *out += "\r\n\r\n";
  if (!head_request) {
    *out += body;
  }
}

void AppendRedirectResponse(int status, std::string_view location, std::string* out) {
  std::string_view phrase = status == 301   ? "Moved Permanently"
                            : status == 302 ? "Found"
                            : status == 307 ? "Temporary Redirect"
                                            : "Permanent Redirect";
  *out += "HTTP/1.1 ";
  *out += std::to_string(status);
  *out += ' ';
  *out += phrase;
  *out += "\r\nLocation: ";
  *out += location;
  *out += "\r\nContent-Length: 0\r\n\r\n";
}

}  // namespace kwd::proxy
