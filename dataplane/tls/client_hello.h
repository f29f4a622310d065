#pragma once

// Reads the server name (SNI, RFC 6066 section 3) from a TLS ClientHello
// without terminating TLS: what a passthrough listener routes by. The parser
// is bounded and incremental: feed it every byte read so far (the same
// growing buffer); it reassembles the handshake message from as many TLS
// records and TCP segments as the client used, and refuses anything that is
// not a well-formed ClientHello inside `max_bytes` (records included).
//
// Only the framing the server name depends on is checked: record headers
// (type handshake, version 3.x, 1..16384 bytes), the handshake header
// (ClientHello), the ClientHello's vectors and the extension list. The bytes
// themselves are forwarded untouched to the server, which does the rest.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kwd::tls {

enum class ClientHelloStatus : uint8_t {
  kNeedMore,  // a prefix of a valid ClientHello: read more
  kDone,      // complete; server_name() is the SNI ("" when none was sent)
  kInvalid,   // not a TLS ClientHello (garbage, SSLv2, another message, bad framing)
  kTooLarge,  // the ClientHello does not fit in max_bytes
};

// "need-more", "done", "invalid", "too-large".
std::string_view ClientHelloStatusName(ClientHelloStatus status);

inline constexpr size_t kDefaultMaxClientHelloBytes = 16 * 1024;

class ClientHelloParser {
 public:
  explicit ClientHelloParser(size_t max_bytes = kDefaultMaxClientHelloBytes)
      : max_bytes_(max_bytes) {}

  // `data` is everything received so far (the previous call's bytes
  // followed by new ones). Once the result is not kNeedMore it stays.
  ClientHelloStatus Feed(std::string_view data);

  ClientHelloStatus status() const { return status_; }
  // The host name, lowercased, without a trailing dot; "" when absent.
  const std::string& server_name() const { return server_name_; }
  // Why the ClientHello was refused (for the log), "" otherwise.
  std::string_view error() const { return error_; }

 private:
  ClientHelloStatus Fail(ClientHelloStatus status, std::string_view why);
  // Parses the complete ClientHello body (after the 4-byte handshake header).
  ClientHelloStatus ParseBody(std::string_view body);

  size_t max_bytes_;
  ClientHelloStatus status_ = ClientHelloStatus::kNeedMore;
  size_t consumed_ = 0;    // bytes of complete records taken from `data`
  std::string handshake_;  // reassembled handshake bytes
  std::string server_name_;
  std::string_view error_;
};

}  // namespace kwd::tls
