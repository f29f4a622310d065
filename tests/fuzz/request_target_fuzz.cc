// Fuzzes http::ParseRequestTarget, the request-target check that HTTP/1.1's
// request line and HTTP/2's :path share (dataplane/http/parser.h), over
// arbitrary bytes: the first byte picks the method, the rest is the target.
// An accepted target holds only RFC 3986 path characters and well-formed
// escapes (no fragment, no byte 0x80-0xFF), an absolute form's authority is
// not empty and has no userinfo, and the request line built from the same
// target is accepted or refused alike. Any violation aborts.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dataplane/http/chars.h"
#include "dataplane/http/parser.h"

namespace {

void Check(bool condition) {
  if (!condition) {
    std::abort();
  }
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Only path characters and %XX escapes.
void CheckPathBytes(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      Check(i + 2 < s.size() && IsHex(s[i + 1]) && IsHex(s[i + 2]));
      i += 2;
      continue;
    }
    Check(kwd::http::chars::IsPathChar(s[i]));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  static constexpr std::string_view kMethods[] = {"GET", "OPTIONS", "CONNECT", "POST"};
  std::string_view method = kMethods[data[0] % 4];
  std::string_view target(reinterpret_cast<const char*>(data + 1), size - 1);
  kwd::http::RequestHead head;
  head.method = method;
  head.target = target;
  kwd::http::ParseError error = kwd::http::ParseRequestTarget(&head);
  if (error == kwd::http::ParseError::kNone) {
    switch (head.target_form) {
      case kwd::http::TargetForm::kOrigin:
        Check(!target.empty() && target.front() == '/');
        Check(head.path_and_query == target);
        CheckPathBytes(target);
        break;
      case kwd::http::TargetForm::kAbsolute:
        Check(!head.authority.empty());
        Check(head.authority.find('@') == std::string_view::npos);
        CheckPathBytes(head.path_and_query);
        break;
      case kwd::http::TargetForm::kAsterisk:
        Check(target == "*" && method == "OPTIONS");
        break;
      case kwd::http::TargetForm::kAuthority:
        Check(method == "CONNECT" && head.authority == target);
        break;
    }
  } else {
    Check(error == kwd::http::ParseError::kBadTarget);
  }
  // The request line decides alike, when the target fits in one as a single
  // token (no byte that ends the token or the line, within the length limit).
  if (!target.empty() &&
      target.find_first_of(std::string_view(" \r\n\t\0", 5)) == std::string_view::npos &&
      target.size() <= kwd::http::HeadLimits{}.max_target_bytes) {
    std::string request(method);
    request.append(" ").append(target).append(" HTTP/1.1\r\nHost: h\r\n\r\n");
    kwd::http::RequestParser parser;
    kwd::http::RequestHead line;
    kwd::http::ParseResult parsed = parser.Parse(request, &line);
    if (parsed.failed()) {
      Check(parsed.error != kwd::http::ParseError::kBadTarget ||
            error == kwd::http::ParseError::kBadTarget);
    } else {
      Check(error == kwd::http::ParseError::kNone);
      Check(line.target_form == head.target_form);
    }
  }
  return 0;
}
