#pragma once

// Masking of credentials and session identifiers for access logs, as SAP's
// ICM log does: the values of sap-contextid, jsessionid, MYSAPSSO2,
// sap-password and SAP-R3Auth (query parameter, ;path parameter, cookie, and
// a context id inside the Base64 "(...)" URL segment) and the whole
// Authorization value become "***". Output is appended to a caller-owned
// buffer; names are matched ASCII case-insensitively after decoding their
// %XX escapes ("sap%2Dpassword" is sap-password to a backend).

#include <string>
#include <string_view>

namespace kwd::http {

inline constexpr std::string_view kMask = "***";

bool IsSensitiveParameter(std::string_view name);

// "/sap/bc/x;jsessionid=abc?sap-contextid=SID%3a...&a=1"
//   -> "/sap/bc/x;jsessionid=***?sap-contextid=***&a=1"
void AppendMaskedTarget(std::string_view target, std::string& out);

// "a=1; MYSAPSSO2=AjQx...; JSESSIONID=x" -> "a=1; MYSAPSSO2=***; JSESSIONID=***"
void AppendMaskedCookies(std::string_view cookie_header, std::string& out);

// Any request field: Authorization and Proxy-Authorization become "***",
// Cookie is masked per cookie, everything else is copied.
void AppendMaskedFieldValue(std::string_view name, std::string_view value, std::string& out);

}  // namespace kwd::http
