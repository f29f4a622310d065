#pragma once

// Incremental decoder for the chunked transfer coding (RFC 9112 7.1). It
// keeps its position between calls, so bytes can arrive in any split, and
// hands out chunk data as views into the caller's input (no copy).
// Chunk extensions must follow RFC 9112 7.1.1 (`*( BWS ";" BWS token
// [ BWS "=" BWS ( token / quoted-string ) ] )`, bounded line) and are
// ignored. Trailer fields are validated with the header rules and bounded,
// then dropped: the proxy strips the Trailer field and re-frames.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dataplane/http/parser.h"

namespace kwd::http {

struct ChunkedLimits {
  uint64_t max_body_bytes = 102400ull * 1024;  // running total; beyond it: 413
  size_t max_size_line_bytes = 4096;           // size plus extensions
  size_t max_trailer_bytes = 8 * 1024;
  size_t max_trailer_fields = 32;
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
};

}  // namespace kwd::http
