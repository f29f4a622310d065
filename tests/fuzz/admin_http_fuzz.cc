// Fuzzes the request head parser of the admin ports (common/admin_http):
// ParseAdminHttpHead over the bytes a client sent. Input: byte 0 chooses a
// split point, byte 1 the limits (>= 0xf0: the defaults), the rest is what
// the client sent. Every input gets a verdict within the limits, and the same
// bytes fed in two reads (as the server does) give the same verdict as fed
// whole. Any violation aborts.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/admin_http.h"

namespace {

using kwd::AdminHttpHead;
using kwd::AdminHttpLimits;

void Check(bool condition) {
  if (!condition) {
    std::abort();
  }
}

bool Same(const AdminHttpHead& a, const AdminHttpHead& b) {
  return a.verdict == b.verdict && a.status == b.status && a.reason == b.reason &&
         a.head_size == b.head_size && a.content_length == b.content_length &&
         a.request.method == b.request.method && a.request.path == b.request.path &&
         a.request.query == b.request.query && a.request.host == b.request.host;
}

bool IsTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// What may go on to a handler in a path or query: visible ASCII, no fragment.
bool IsCleanTarget(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return c > 0x20 && c < 0x7f && c != '#'; });
}

AdminHttpLimits LimitsFor(uint8_t byte) {
  AdminHttpLimits limits;
  if (byte < 0xf0) {
    limits.max_head_bytes = 8 + (byte & 0x3f) * 8;  // 8..512
    static constexpr size_t kBodies[] = {0, 16, 4096, 1 << 20};
    limits.max_body_bytes = kBodies[byte >> 6];
  }
  return limits;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? x + 32 : x) == (y >= 'A' && y <= 'Z' ? y + 32 : y);
         });
}

// An accepted head, reread independently: the request line is the method,
// path and query the handler sees; every field is name:value with a token
// name and no control characters; no Transfer-Encoding; Content-Length, when
// sent, is the length reported.
void CheckHead(const AdminHttpHead& r, std::string_view head) {
  size_t line_end = head.find("\r\n");
  std::string_view line = head.substr(0, line_end);
  std::string target = r.request.path;
  if (line.find('?') != std::string_view::npos) {
    target += "?" + r.request.query;
  } else {
    Check(r.request.query.empty());
  }
  Check(line == r.request.method + " " + target + " HTTP/1.1" ||
        line == r.request.method + " " + target + " HTTP/1.0");
  bool has_length = false;
  bool has_host = false;
  for (size_t pos = line_end + 2; pos < head.size() - 2;) {
    size_t end = head.find("\r\n", pos);
    std::string_view field = head.substr(pos, end - pos);
    pos = end + 2;
    size_t colon = field.find(':');
    Check(colon != std::string_view::npos && colon > 0);
    std::string_view name = field.substr(0, colon);
    std::string_view value = field.substr(colon + 1);
    Check(std::all_of(name.begin(), name.end(), IsTokenChar));
    Check(std::none_of(value.begin(), value.end(), [](char c) {
      return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
    }));
    Check(!EqualsIgnoreCase(name, "transfer-encoding"));
    if (EqualsIgnoreCase(name, "host")) {
      // One Host with a value, the one the Host check sees.
      Check(!has_host && !r.request.host.empty());
      size_t first = value.find_first_not_of(" \t");
      size_t last = value.find_last_not_of(" \t");
      Check(first != std::string_view::npos &&
            value.substr(first, last - first + 1) == r.request.host);
      has_host = true;
      // Only loopback, this address and the configured names pass it.
      if (kwd::AdminHostAllowed(r.request.host, "10.9.8.7", {"kwd.example", "*.kwd.example"})) {
        std::string host = r.request.host;
        for (char& c : host) {
          c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
        Check(host.starts_with("localhost") || host.starts_with("127.") || host.starts_with("[") ||
              host.starts_with("10.9.8.7") || host.find("kwd.example") != std::string::npos ||
              host.starts_with("::"));
      }
    }
    if (EqualsIgnoreCase(name, "content-length")) {
      size_t first = value.find_first_not_of(" \t");
      size_t last = value.find_last_not_of(" \t");
      Check(first != std::string_view::npos);
      std::string_view digits = value.substr(first, last - first + 1);
      while (digits.size() > 1 && digits.front() == '0') {
        digits.remove_prefix(1);  // 1*DIGIT: leading zeros are allowed
      }
      Check(digits == std::to_string(r.content_length));
      has_length = true;
    }
  }
  Check(has_length || r.content_length == 0);
  Check(has_host || r.request.host.empty());
}

void CheckVerdict(const AdminHttpHead& r, std::string_view input, const AdminHttpLimits& limits) {
  size_t blank = input.find("\r\n\r\n");
  switch (r.verdict) {
    case AdminHttpHead::Verdict::kNeedMore:
      Check(blank == std::string_view::npos && input.size() <= limits.max_head_bytes);
      Check(r.status == 0 && r.reason.empty());
      break;
    case AdminHttpHead::Verdict::kRefuse:
      Check(r.status == 400 || r.status == 411 || r.status == 413 || r.status == 431 ||
            r.status == 505);
      Check(!r.reason.empty());
      // 505 only for a well-formed HTTP-version (HTTP/DIGIT.DIGIT) other than 1.0 or 1.1.
      if (r.status == 505) {
        std::string_view line = input.substr(0, input.find("\r\n"));
        std::string_view version = line.substr(line.rfind(' ') + 1);
        Check(version.size() == 8 && version.starts_with("HTTP/") && version[6] == '.' &&
              std::isdigit(static_cast<unsigned char>(version[5])) &&
              std::isdigit(static_cast<unsigned char>(version[7])));
      }
      // A head over the limit is refused 431, whatever it holds.
      Check((r.status == 431) == (blank == std::string_view::npos
                                      ? input.size() > limits.max_head_bytes
                                      : blank + 4 > limits.max_head_bytes));
      break;
    case AdminHttpHead::Verdict::kRequest:
      Check(r.status == 0 && r.reason.empty());
      Check(blank != std::string_view::npos && r.head_size == blank + 4);
      Check(r.head_size <= limits.max_head_bytes && r.head_size <= input.size());
      Check(r.content_length <= limits.max_body_bytes);
      Check(!r.request.method.empty() &&
            std::all_of(r.request.method.begin(), r.request.method.end(), IsTokenChar));
      Check(input.starts_with(r.request.method + " /"));
      Check(!r.request.path.empty() && r.request.path.front() == '/');
      Check(r.request.path.find('?') == std::string::npos);
      Check(IsCleanTarget(r.request.path) && IsCleanTarget(r.request.query));
      CheckHead(r, input.substr(0, r.head_size));
      break;
    default:
      Check(false);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) {
    return 0;
  }
  AdminHttpLimits limits = LimitsFor(data[1]);
  std::string_view input(reinterpret_cast<const char*>(data) + 2, size - 2);
  size_t split = data[0] % (input.size() + 1);

  AdminHttpHead whole = kwd::ParseAdminHttpHead(input, limits);
  CheckVerdict(whole, input, limits);

  // Bytes after the head (a body, a pipelined request) change nothing.
  if (whole.verdict == AdminHttpHead::Verdict::kRequest) {
    Check(Same(kwd::ParseAdminHttpHead(input.substr(0, whole.head_size), limits), whole));
  }

  // The same bytes in two reads: a verdict on the first part stands, and
  // otherwise the second call (which skips what the first searched) agrees.
  AdminHttpHead first = kwd::ParseAdminHttpHead(input.substr(0, split), limits);
  CheckVerdict(first, input.substr(0, split), limits);
  if (first.verdict == AdminHttpHead::Verdict::kNeedMore) {
    Check(Same(kwd::ParseAdminHttpHead(input, limits, split), whole));
  } else {
    Check(Same(first, whole));
  }
  return 0;
}
