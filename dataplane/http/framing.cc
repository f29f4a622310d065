#include "dataplane/http/framing.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

namespace kwd::http {

bool HasToken(std::string_view list, std::string_view token) {
  // A list no longer than the token holds it only as its one element
  // ("Connection: close" asked for "close").
  if (list.size() <= token.size()) {
    return EqualsIgnoreCase(list, token);
  }
  // A short list without a comma is one element ("keep-alive" asked for
  // "close"): trimmed, it is the one ForEachListElement would give.
  if (list.size() >= 8 && list.size() <= 32 && FindComma(list) == std::string_view::npos) {
    list = TrimOws(list);
    return !list.empty() && EqualsIgnoreCase(list, token);
  }
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

bool Has(uint32_t present, FieldId id) {
  return (present & (1u << static_cast<unsigned>(id))) != 0;
}

bool AnyFieldHasToken(std::span<const Header> fields, FieldId id, std::string_view token) {
  for (const Header& h : fields) {
    if (h.Id() == id && HasToken(h.value, token)) {
      return true;
    }
  }
  return false;
}

enum class LengthVerdict { kAbsent, kValid, kInvalid, kConflicting };

// One to 18 digits (no overflow): what ReadContentLength reads first.
bool PlainLength(std::string_view value, uint64_t* length) {
  if (value.empty() || value.size() > 18) {
    return false;
  }
  uint64_t n = 0;
  for (char c : value) {
    if (c < '0' || c > '9') {
      return false;
    }
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  *length = n;
  return true;
}

// All Content-Length fields and list elements must be the same 1*DIGIT value.
LengthVerdict ReadContentLength(std::span<const Header> fields, uint64_t* length) {
  bool seen = false;
  uint64_t first = 0;
  for (const Header& h : fields) {
    if (h.Id() != FieldId::kContentLength) {
      continue;
    }
    // The common field: one plain number (up to 18 digits cannot overflow).
    if (!h.value.empty() && h.value.size() <= 18) {
      uint64_t value = 0;
      size_t i = 0;
      for (; i < h.value.size() && h.value[i] >= '0' && h.value[i] <= '9'; ++i) {
        value = value * 10 + static_cast<uint64_t>(h.value[i] - '0');
      }
      if (i == h.value.size()) {
        if (seen && value != first) {
          return LengthVerdict::kConflicting;
        }
        seen = true;
        first = value;
        continue;
      }
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
    if (h.Id() != FieldId::kTransferEncoding) {
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
  uint32_t present = 0;
  for (const Header& h : fields) {
    FieldId id = h.Id();
    present |= 1u << static_cast<unsigned>(id);
    if (id == FieldId::kHost) {
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
  LengthVerdict length_verdict = Has(present, FieldId::kContentLength)
                                     ? ReadContentLength(fields, &length)
                                     : LengthVerdict::kAbsent;
  CodingVerdict coding = Has(present, FieldId::kTransferEncoding) ? ReadTransferEncoding(fields)
                                                                  : CodingVerdict::kAbsent;
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

  const bool connection = Has(present, FieldId::kConnection);
  bool close = connection && AnyFieldHasToken(fields, FieldId::kConnection, "close");
  info->keep_alive =
      head.version_minor == 1
          ? !close
          : !close && connection && AnyFieldHasToken(fields, FieldId::kConnection, "keep-alive");
  // Expect is an HTTP/1.1 feature; a 1.0 client would not wait for 100.
  info->expect_continue = head.version_minor == 1 && Has(present, FieldId::kExpect) &&
                          AnyFieldHasToken(fields, FieldId::kExpect, "100-continue");
  if (!Has(present, FieldId::kUpgrade)) {
    return {};
  }
  if (const Header* upgrade = head.Find(FieldId::kUpgrade); upgrade != nullptr) {
    info->upgrade = upgrade->value;
    info->upgrade_websocket = head.version_minor == 1 && head.method == "GET" &&
                              HasToken(upgrade->value, "websocket") && connection &&
                              AnyFieldHasToken(fields, FieldId::kConnection, "upgrade");
  }
  return {};
}

FramingResult AnalyzeResponse(const ResponseHead& head, std::string_view request_method,
                              ResponseInfo* info) {
  *info = {};
  std::span<const Header> fields = head.fields();
  // One pass: which fields are there, and the Content-Length field when
  // there is one (the common case: one plain number, read here).
  uint32_t present = 0;
  size_t length_fields = 0;
  const Header* length_field = nullptr;
  for (const Header& h : fields) {
    const FieldId id = h.Id();
    present |= 1u << static_cast<unsigned>(id);
    if (id == FieldId::kContentLength) {
      ++length_fields;
      length_field = &h;
    }
  }
  const bool connection = Has(present, FieldId::kConnection);
  bool close = connection && AnyFieldHasToken(fields, FieldId::kConnection, "close");
  info->keep_alive =
      head.version_minor == 1
          ? !close
          : !close && connection && AnyFieldHasToken(fields, FieldId::kConnection, "keep-alive");

  uint64_t length = 0;
  LengthVerdict length_verdict = LengthVerdict::kAbsent;
  if (length_fields == 1 && PlainLength(length_field->value, &length)) {
    length_verdict = LengthVerdict::kValid;
  } else if (length_fields != 0) {
    length_verdict = ReadContentLength(fields, &length);
  }
  CodingVerdict coding = Has(present, FieldId::kTransferEncoding) ? ReadTransferEncoding(fields)
                                                                  : CodingVerdict::kAbsent;
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

}  // namespace kwd::http
