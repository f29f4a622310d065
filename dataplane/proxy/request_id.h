#pragma once

// Request ids and trace context for the access log and the upstream.
//
// X-Request-Id: a request from a trusted peer (--trusted-proxies) keeps the id it carries (when
// it is a sane token); any other request gets a new random id. Either way the
// id is logged and forwarded upstream as the only X-Request-Id.
// traceparent (W3C Trace Context): passed through unchanged; its trace id is
// logged when the value is well-formed.

#include <string>
#include <string_view>

namespace kwd::proxy {

// A request id worth keeping: 1 to 128 characters of [A-Za-z0-9._:+/=-].
bool ValidRequestId(std::string_view id);

// Sets `out` to a new id: 32 lowercase hex digits (128 random bits).
void GenerateRequestId(std::string* out);

// The trace id (32 lowercase hex digits) of a traceparent value, or empty
// when the value is not a valid traceparent (version ff, an all-zero trace or
// parent id, wrong lengths or digits).
std::string_view TraceIdFromTraceparent(std::string_view value);

}  // namespace kwd::proxy
