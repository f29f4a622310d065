#pragma once

// Incremental decoder for the chunked transfer coding (RFC 9112 7.1). It
// keeps its position between calls, so bytes can arrive in any split, and
// hands out chunk data as views into the caller's input (no copy).
// Chunk extensions must follow RFC 9112 7.1.1 (`*( BWS ";" BWS token
// [ BWS "=" BWS ( token / quoted-string ) ] )`, bounded line) and are
// ignored. Trailer fields are validated with the header rules and bounded;
// they are dropped unless `keep_trailers` is set, then trailers() holds the
// validated "name:value\r\n" lines as received (the HTTP/2 session and
// HTTP/1.1 clients that sent `TE: trailers` get them, filtered by
// ForEachPassableTrailer).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dataplane/http/parser.h"

namespace kwd::http {

struct ChunkedLimits {
  uint64_t max_body_bytes = 102400ull * 1024;  // running total; beyond it: 413
  size_t max_size_line_bytes = 4096;           // size plus extensions
  size_t max_trailer_bytes = 8 * 1024;
  size_t max_trailer_fields = 32;
  bool keep_trailers = false;  // trailers() holds them once kDone
};

enum class ChunkedStatus : uint8_t {
  kData,      // `data` holds body bytes (a view into the input)
  kNeedMore,  // all input consumed; call again with the next bytes
  kDone,      // the last chunk and trailers ended; `consumed` stops right after
  kError,
};

struct ChunkedResult {
  ChunkedStatus status = ChunkedStatus::kNeedMore;
  size_t consumed = 0;
  std::string_view data;
  ParseError error = ParseError::kNone;
  int http_status = 0;  // 400, 413 or 431 (trailers too large)
};

class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(ChunkedLimits limits = {}) : limits_(limits) {}

  // Decodes from the start of `input` (bytes not consumed by an earlier call).
  // Loop: pass the unconsumed rest until kNeedMore, kDone or kError.
  ChunkedResult Decode(std::string_view input);

  uint64_t body_bytes() const { return body_bytes_; }
  bool done() const { return state_ == State::kDone; }
  // With `keep_trailers`: the trailer section's "name:value\r\n" lines
  // (validated, within the limits), complete once done(); empty after an
  // error or without the option.
  std::string_view trailers() const { return trailers_; }
  void Reset() { *this = ChunkedDecoder(limits_); }

 private:
  enum class State : uint8_t {
    kSizeStart,
    kSize,
    kSizeBws,       // BWS after the size or an extension: only ";" may follow
    kExtNameStart,  // after ";" (and BWS): a token must follow
    kExtName,
    kExtNameBws,     // BWS after a name: "=" or ";"
    kExtValueStart,  // after "=" (and BWS): a token or a quoted-string
    kExtToken,
    kExtQuoted,
    kExtQuotedPair,  // after a backslash inside the quoted-string
    kExtQuoteEnd,    // after the closing quote
    kSizeLf,
    kData,
    kDataCr,
    kDataLf,
    kTrailerLineStart,
    kTrailerName,
    kTrailerValue,
    kTrailerLf,
    kFinalLf,
    kDone,
    kError,
  };

  ChunkedResult Fail(ParseError error, int status, size_t consumed);

  ChunkedLimits limits_;
  State state_ = State::kSizeStart;
  uint64_t chunk_remaining_ = 0;
  uint64_t body_bytes_ = 0;
  size_t line_bytes_ = 0;
  size_t trailer_bytes_ = 0;
  size_t trailer_fields_ = 0;
  ParseError error_ = ParseError::kNone;
  int error_status_ = 0;
  std::string trailers_;
};

// True for fields that must not be passed on as trailers (RFC 9110 6.5.1,
// RFC 9113 8.2.2): framing and connection-specific fields, routing, request
// modifiers, authentication, response control data and content metadata;
// and the forwarding fields (http::IsForwardingField: X-Forwarded-*,
// Forwarded, SSL_CLIENT_CERT, ...), which only heads carry.
bool IsForbiddenTrailer(std::string_view name);

// Calls fn(name, value) for each field of a trailers() block that may be
// passed on, the value without surrounding whitespace.
template <typename Fn>
void ForEachPassableTrailer(std::string_view block, Fn&& fn) {
  for (size_t guard = 0; !block.empty() && guard < 1024; ++guard) {
    size_t eol = block.find("\r\n");
    std::string_view line = block.substr(0, eol);
    block = eol == std::string_view::npos ? std::string_view() : block.substr(eol + 2);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      continue;
    }
    std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
      value.remove_suffix(1);
    }
    if (!IsForbiddenTrailer(name)) {
      fn(name, value);
    }
  }
}

}  // namespace kwd::http
