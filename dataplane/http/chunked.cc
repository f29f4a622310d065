#include "dataplane/http/chunked.h"

#include <algorithm>

#include "common/crypto.h"
#include "dataplane/http/chars.h"
#include "dataplane/http/forward.h"

namespace kwd::http {

namespace {

bool IsBws(char c) {
  return c == ' ' || c == '\t';
}

}  // namespace

bool IsForbiddenTrailer(std::string_view name) {
  // RFC 9110 6.5.1 and RFC 9113 8.2.2; conservative: anything a recipient
  // could act on as if it were a header field stays out of the trailers.
  static constexpr std::string_view kForbidden[] = {
      // framing and connection-specific
      "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
      "upgrade", "te", "trailer",
      // routing and request modifiers
      "host", "expect", "max-forwards", "range", "if-match", "if-none-match", "if-modified-since",
      "if-unmodified-since", "if-range", "cache-control", "pragma",
      // authentication and state
      "authorization", "proxy-authorization", "www-authenticate", "proxy-authenticate", "cookie",
      "set-cookie",
      // response control data
      "age", "expires", "date", "location", "retry-after", "vary", "warning",
      // content metadata
      "content-type", "content-encoding", "content-range", "content-language", "content-location"};
  if (name.empty() || name.front() == ':') {
    return true;
  }
  // Who the client is and how it connected: only the proxy (or a trusted
  // peer, in the head) asserts that. A backend reading trailers merged into
  // the head would otherwise take a client's X-Forwarded-For or
  // SSL_CLIENT_CERT sent after the body.
  if (IsForwardingField(ClassifyFieldName(name))) {
    return true;
  }
  for (std::string_view f : kForbidden) {
    if (EqualsIgnoreCase(name, f)) {
      return true;
    }
  }
  return false;
}

ChunkedResult ChunkedDecoder::Fail(ParseError error, int status, size_t consumed) {
  state_ = State::kError;
  trailers_.clear();  // a refused trailer section passes nothing on
  error_ = error;
  error_status_ = status;
  ChunkedResult r;
  r.status = ChunkedStatus::kError;
  r.consumed = consumed;
  r.error = error;
  r.http_status = status;
  return r;
}

ChunkedResult ChunkedDecoder::Decode(std::string_view input) {
  if (state_ == State::kError) {
    return Fail(error_, error_status_, 0);
  }
  if (state_ == State::kDone) {
    ChunkedResult r;
    r.status = ChunkedStatus::kDone;
    return r;
  }
  size_t i = 0;
  while (i < input.size()) {
    if (state_ == State::kData) {
      size_t n = static_cast<size_t>(
          std::min<uint64_t>(chunk_remaining_, static_cast<uint64_t>(input.size() - i)));
      chunk_remaining_ -= n;
      if (chunk_remaining_ == 0) {
        state_ = State::kDataCr;
      }
      ChunkedResult r;
      r.status = ChunkedStatus::kData;
      r.data = input.substr(i, n);
      r.consumed = i + n;
      return r;
    }
    char c = input[i];
    switch (state_) {
      case State::kSizeStart:
      case State::kSize: {
        int digit = HexDigitValue(c);
        if (digit >= 0) {
          if ((chunk_remaining_ >> 60) != 0) {
            return Fail(ParseError::kBadChunkSize, 400, i);
          }
          chunk_remaining_ = (chunk_remaining_ << 4) | static_cast<uint64_t>(digit);
          state_ = State::kSize;
        } else if (state_ == State::kSizeStart) {
          return Fail(ParseError::kBadChunkSize, 400, i);
        } else if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (IsBws(c)) {
          state_ = State::kSizeBws;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
        } else {
          return Fail(ParseError::kBadChunkSize, 400, i);
        }
        break;
      }
      case State::kSizeBws:
        // Whitespace is only allowed before a ";" (BWS ";" in chunk-ext).
        if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (!IsBws(c)) {
          return Fail(ParseError::kBadChunkExtension, 400, i);
        }
        break;
      case State::kExtNameStart:
        if (chars::IsToken(c)) {
          state_ = State::kExtName;
        } else if (!IsBws(c)) {
          return Fail(ParseError::kBadChunkExtension, 400, i);  // "2;", "2;=x", "2; "
        }
        break;
      case State::kExtName:
      case State::kExtNameBws:
        if (c == '=') {
          state_ = State::kExtValueStart;
        } else if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (IsBws(c)) {
          state_ = State::kExtNameBws;
        } else if (state_ == State::kExtName && chars::IsToken(c)) {
          // still the name
        } else if (state_ == State::kExtName && c == '\r') {
          state_ = State::kSizeLf;
        } else {
          return Fail(ParseError::kBadChunkExtension, 400, i);
        }
        break;
      case State::kExtValueStart:
        if (c == '"') {
          state_ = State::kExtQuoted;
        } else if (chars::IsToken(c)) {
          state_ = State::kExtToken;
        } else if (!IsBws(c)) {
          return Fail(ParseError::kBadChunkExtension, 400, i);
        }
        break;
      case State::kExtToken:
      case State::kExtQuoteEnd:
        if (c == ';') {
          state_ = State::kExtNameStart;
        } else if (IsBws(c)) {
          state_ = State::kSizeBws;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (state_ != State::kExtToken || !chars::IsToken(c)) {
          return Fail(ParseError::kBadChunkExtension, 400, i);
        }
        break;
      case State::kExtQuoted:
        if (c == '"') {
          state_ = State::kExtQuoteEnd;
        } else if (c == '\\') {
          state_ = State::kExtQuotedPair;
        } else if (!chars::IsFieldValueChar(c)) {
          return Fail(ParseError::kBadChunkExtension, 400, i);  // CR: unbalanced quote
        }
        break;
      case State::kExtQuotedPair:
        if (!chars::IsFieldValueChar(c)) {
          return Fail(ParseError::kBadChunkExtension, 400, i);
        }
        state_ = State::kExtQuoted;
        break;
      case State::kSizeLf:
        if (c != '\n') {
          return Fail(ParseError::kBareCr, 400, i);
        }
        line_bytes_ = 0;
        if (chunk_remaining_ == 0) {
          state_ = State::kTrailerLineStart;
        } else if (chunk_remaining_ > limits_.max_body_bytes - body_bytes_) {
          return Fail(ParseError::kBodyTooLarge, 413, i);
        } else {
          body_bytes_ += chunk_remaining_;
          state_ = State::kData;
        }
        ++i;
        continue;
      case State::kDataCr:
        if (c != '\r') {
          return Fail(ParseError::kMissingChunkCrlf, 400, i);
        }
        state_ = State::kDataLf;
        break;
      case State::kDataLf:
        if (c != '\n') {
          return Fail(ParseError::kMissingChunkCrlf, 400, i);
        }
        state_ = State::kSizeStart;
        break;
      case State::kTrailerLineStart:
        if (c == '\r') {
          state_ = State::kFinalLf;
        } else if (chars::IsToken(c)) {
          state_ = State::kTrailerName;
          if (limits_.keep_trailers) {
            trailers_.push_back(c);
          }
        } else {
          return Fail(ParseError::kBadTrailer, 400, i);
        }
        break;
      case State::kTrailerName:
        if (c == ':') {
          state_ = State::kTrailerValue;
        } else if (!chars::IsToken(c)) {
          return Fail(ParseError::kBadTrailer, 400, i);
        }
        if (limits_.keep_trailers) {
          trailers_.push_back(c);
        }
        break;
      case State::kTrailerValue:
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if (!chars::IsFieldValueChar(c)) {
          return Fail(ParseError::kBadTrailer, 400, i);
        }
        if (limits_.keep_trailers) {
          trailers_.push_back(c);
        }
        break;
      case State::kTrailerLf:
        if (c != '\n') {
          return Fail(ParseError::kBadTrailer, 400, i);
        }
        if (++trailer_fields_ > limits_.max_trailer_fields) {
          return Fail(ParseError::kTrailerTooLarge, 431, i);
        }
        if (limits_.keep_trailers) {
          trailers_.push_back('\n');
        }
        state_ = State::kTrailerLineStart;
        break;
      case State::kFinalLf: {
        if (c != '\n') {
          return Fail(ParseError::kBadTrailer, 400, i);
        }
        state_ = State::kDone;
        ChunkedResult r;
        r.status = ChunkedStatus::kDone;
        r.consumed = i + 1;
        return r;
      }
      case State::kData:
      case State::kDone:
      case State::kError:
        break;  // handled before the switch
    }
    if (state_ >= State::kSize && state_ <= State::kSizeLf) {
      if (++line_bytes_ > limits_.max_size_line_bytes) {
        return Fail(ParseError::kChunkLineTooLong, 400, i);
      }
    } else if (state_ >= State::kTrailerLineStart && state_ <= State::kFinalLf) {
      if (++trailer_bytes_ > limits_.max_trailer_bytes) {
        return Fail(ParseError::kTrailerTooLarge, 431, i);
      }
    }
    ++i;
  }
  ChunkedResult r;
  r.status = ChunkedStatus::kNeedMore;
  r.consumed = input.size();
  return r;
}

}  // namespace kwd::http
