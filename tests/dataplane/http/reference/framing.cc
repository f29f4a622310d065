#include "tests/dataplane/http/reference/framing.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>

namespace kwd::http_ref {

bool HasToken(std::string_view list, std::string_view token) {
  bool found = false;
  ForEachListElement(list, [&](std::string_view element) {
    if (EqualsIgnoreCase(element, token)) {
      found = true;
      return false;
    }
    return true;
  });
  return found;
}

namespace {

bool AnyFieldHasToken(std::span<const Header> fields, std::string_view name,
                      std::string_view token) {
  for (const Header& h : fields) {
    if (EqualsIgnoreCase(h.name, name) && HasToken(h.value, token)) {
      return true;
    }
  }
  return false;
}

enum class LengthVerdict { kAbsent, kValid, kInvalid, kConflicting };

// All Content-Length fields and list elements must be the same 1*DIGIT value.
LengthVerdict ReadContentLength(std::span<const Header> fields, uint64_t* length) {
  bool seen = false;
  uint64_t first = 0;
  for (const Header& h : fields) {
    if (!EqualsIgnoreCase(h.name, "content-length")) {
      continue;
    }
    bool any_element = false;
    bool valid = true;
    bool conflicting = false;
    size_t elements = 0;
    ForEachListElement(h.value, [&](std::string_view element) {
      any_element = true;
      ++elements;
      uint64_t value = 0;
      for (char c : element) {
        if (c < '0' || c > '9') {
          valid = false;
          return false;
        }
        uint64_t digit = static_cast<uint64_t>(c - '0');
        if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
          valid = false;
          return false;
        }
        value = value * 10 + digit;
      }
      if (seen && value != first) {
        conflicting = true;
        return false;
      }
      seen = true;
      first = value;
      return true;
    });
    // An empty field or an empty element ("5,", "5,,5") is not a valid length
    // either: ForEachListElement skips them, so count the commas.
    if (!valid || !any_element) {
      return LengthVerdict::kInvalid;
    }
    if (conflicting) {
      return LengthVerdict::kConflicting;
    }
    if (elements != static_cast<size_t>(std::count(h.value.begin(), h.value.end(), ',')) + 1) {
      return LengthVerdict::kInvalid;
    }
  }
  *length = first;
  return seen ? LengthVerdict::kValid : LengthVerdict::kAbsent;
}

enum class CodingVerdict { kAbsent, kChunked, kFinalNotChunked, kUnsupported, kInvalid };

// Transfer-Encoding across every field, in order (RFC 9112 6.1).
CodingVerdict ReadTransferEncoding(std::span<const Header> fields) {
  bool present = false;
  bool invalid = false;
  int chunked_count = 0;
  bool other_coding = false;
  bool last_is_chunked = false;
  for (const Header& h : fields) {
    if (!EqualsIgnoreCase(h.name, "transfer-encoding")) {
      continue;
    }
    present = true;
    bool any_element = false;
    ForEachListElement(h.value, [&](std::string_view element) {
      any_element = true;
      std::string_view name = element.substr(0, element.find(';'));
      while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) {
        name.remove_suffix(1);
      }
      if (!IsToken(name)) {
        invalid = true;
        return false;
      }
      if (EqualsIgnoreCase(name, "chunked")) {
        // chunked takes no parameters.
        last_is_chunked = name.size() == element.size();
        invalid = invalid || !last_is_chunked;
        ++chunked_count;
      } else {
        last_is_chunked = false;
        other_coding = true;
      }
      return true;
    });
    if (!any_element) {
      invalid = true;
    }
  }
  if (!present) {
    return CodingVerdict::kAbsent;
  }
  if (invalid || chunked_count > 1) {
    return CodingVerdict::kInvalid;
  }
  if (!last_is_chunked) {
    return CodingVerdict::kFinalNotChunked;
  }
  return other_coding ? CodingVerdict::kUnsupported : CodingVerdict::kChunked;
}

FramingResult Reject(ParseError error, int status) {
  return {error, status};
}

}  // namespace

FramingResult AnalyzeRequest(const RequestHead& head, const FramingLimits& limits,
                             RequestInfo* info) {
  *info = {};
  std::span<const Header> fields = head.fields();

  const Header* host = nullptr;
  int host_count = 0;
  for (const Header& h : fields) {
    if (EqualsIgnoreCase(h.name, "host")) {
      host = &h;
      ++host_count;
    }
  }
  if (host_count > 1) {
    return Reject(ParseError::kDuplicateHost, 400);
  }
  if (host_count == 0 && head.version_minor == 1) {
    return Reject(ParseError::kMissingHost, 400);
  }
  if (host != nullptr && !host->value.empty() &&
      !IsValidAuthority(host->value, /*require_port=*/false)) {
    return Reject(ParseError::kBadHost, 400);
  }
  info->host = head.authority.empty() && host != nullptr ? host->value : head.authority;

  uint64_t length = 0;
  LengthVerdict length_verdict = ReadContentLength(fields, &length);
  CodingVerdict coding = ReadTransferEncoding(fields);
  if (coding != CodingVerdict::kAbsent) {
    if (head.version_minor == 0) {
      return Reject(ParseError::kTransferEncodingOnHttp10, 400);
    }
    if (length_verdict != LengthVerdict::kAbsent) {
      return Reject(ParseError::kContentLengthWithTransferEncoding, 400);
    }
    switch (coding) {
      case CodingVerdict::kChunked:
        info->body = BodyKind::kChunked;
        break;
      case CodingVerdict::kUnsupported:
        return Reject(ParseError::kUnsupportedTransferCoding, 501);
      default:
        return Reject(ParseError::kBadTransferEncoding, 400);
    }
  } else if (length_verdict == LengthVerdict::kInvalid) {
    return Reject(ParseError::kBadContentLength, 400);
  } else if (length_verdict == LengthVerdict::kConflicting) {
    return Reject(ParseError::kConflictingContentLength, 400);
  } else if (length_verdict == LengthVerdict::kValid) {
    if (length > limits.max_body_bytes) {
      return Reject(ParseError::kBodyTooLarge, 413);
    }
    info->content_length = length;
    info->body = length == 0 ? BodyKind::kNone : BodyKind::kContentLength;
  }

  bool close = AnyFieldHasToken(fields, "connection", "close");
  info->keep_alive = head.version_minor == 1
                         ? !close
                         : !close && AnyFieldHasToken(fields, "connection", "keep-alive");
  // Expect is an HTTP/1.1 feature; a 1.0 client would not wait for 100.
  info->expect_continue =
      head.version_minor == 1 && AnyFieldHasToken(fields, "expect", "100-continue");
  if (const Header* upgrade = head.Find("upgrade"); upgrade != nullptr) {
    info->upgrade = upgrade->value;
    info->upgrade_websocket = head.version_minor == 1 && head.method == "GET" &&
                              HasToken(upgrade->value, "websocket") &&
                              AnyFieldHasToken(fields, "connection", "upgrade");
  }
  return {};
}

FramingResult AnalyzeResponse(const ResponseHead& head, std::string_view request_method,
                              ResponseInfo* info) {
  *info = {};
  std::span<const Header> fields = head.fields();
  bool close = AnyFieldHasToken(fields, "connection", "close");
  info->keep_alive = head.version_minor == 1
                         ? !close
                         : !close && AnyFieldHasToken(fields, "connection", "keep-alive");

  uint64_t length = 0;
  LengthVerdict length_verdict = ReadContentLength(fields, &length);
  CodingVerdict coding = ReadTransferEncoding(fields);
  if (length_verdict == LengthVerdict::kInvalid) {
    return Reject(ParseError::kBadContentLength, 502);
  }
  if (length_verdict == LengthVerdict::kConflicting) {
    return Reject(ParseError::kConflictingContentLength, 502);
  }
  if (coding != CodingVerdict::kAbsent && length_verdict != LengthVerdict::kAbsent) {
    return Reject(ParseError::kContentLengthWithTransferEncoding, 502);
  }
  if (coding != CodingVerdict::kAbsent && head.version_minor == 0) {
    return Reject(ParseError::kTransferEncodingOnHttp10, 502);
  }
  if (coding == CodingVerdict::kInvalid) {
    return Reject(ParseError::kBadTransferEncoding, 502);
  }

  info->transfer_coded =
      coding == CodingVerdict::kUnsupported || coding == CodingVerdict::kFinalNotChunked;

  int code = head.status_code;
  if (code == 101) {
    info->body = BodyKind::kTunnel;
    info->keep_alive = false;
    return {};
  }
  if (code < 200) {
    info->interim = true;
    return {};
  }
  if (request_method == "CONNECT" && code < 300) {
    info->body = BodyKind::kTunnel;
    info->keep_alive = false;
    return {};
  }
  if (request_method == "HEAD" || code == 204 || code == 304) {
    return {};
  }
  switch (coding) {
    case CodingVerdict::kChunked:
      info->body = BodyKind::kChunked;
      return {};
    case CodingVerdict::kFinalNotChunked:
    case CodingVerdict::kUnsupported:
      // A coding we do not decode: the body is delimited by the close only
      // when chunked is not last (RFC 9112 6.3); "gzip, chunked" is chunked
      // framing and is passed through as such.
      if (coding == CodingVerdict::kUnsupported) {
        info->body = BodyKind::kChunked;
        return {};
      }
      info->body = BodyKind::kUntilClose;
      info->keep_alive = false;
      return {};
    default:
      break;
  }
  if (length_verdict == LengthVerdict::kValid) {
    info->content_length = length;
    info->body = length == 0 ? BodyKind::kNone : BodyKind::kContentLength;
    return {};
  }
  info->body = BodyKind::kUntilClose;
  info->keep_alive = false;
  return {};
}

}  // namespace kwd::http_ref
