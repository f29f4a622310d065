#include "dataplane/tls/client_hello.h"

namespace kwd::tls {
namespace {

constexpr uint8_t kRecordHandshake = 22;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr size_t kRecordHeaderBytes = 5;
constexpr size_t kMaxRecordPayload = 16384;  // RFC 8446 5.1: 2^14
constexpr uint16_t kExtensionServerName = 0;
constexpr uint8_t kHostName = 0;
constexpr size_t kMaxHostName = 255;

// A bounds-checked reader over one vector of the ClientHello.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool empty() const { return pos_ == data_.size(); }
  bool U8(uint8_t* out) {
    if (data_.size() - pos_ < 1) {
      return false;
    }
    *out = static_cast<uint8_t>(data_[pos_++]);
    return true;
  }
  bool U16(uint16_t* out) {
    if (data_.size() - pos_ < 2) {
      return false;
    }
    *out = static_cast<uint16_t>((static_cast<uint8_t>(data_[pos_]) << 8) |
                                 static_cast<uint8_t>(data_[pos_ + 1]));
    pos_ += 2;
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (data_.size() - pos_ < n) {
      return false;
    }
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // A vector with an 8- or 16-bit length prefix.
  bool Vector8(std::string_view* out) {
    uint8_t n = 0;
    return U8(&n) && Bytes(n, out);
  }
  bool Vector16(std::string_view* out) {
    uint16_t n = 0;
    return U16(&n) && Bytes(n, out);
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

bool HostNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

}  // namespace

std::string_view ClientHelloStatusName(ClientHelloStatus status) {
  switch (status) {
    case ClientHelloStatus::kNeedMore:
      return "need-more";
    case ClientHelloStatus::kDone:
      return "done";
    case ClientHelloStatus::kInvalid:
      return "invalid";
    case ClientHelloStatus::kTooLarge:
      return "too-large";
  }
  return "invalid";
}

ClientHelloStatus ClientHelloParser::Fail(ClientHelloStatus status, std::string_view why) {
  status_ = status;
  error_ = why;
  handshake_.clear();
  handshake_.shrink_to_fit();
  return status_;
}

ClientHelloStatus ClientHelloParser::Feed(std::string_view data) {
  if (status_ != ClientHelloStatus::kNeedMore) {
    return status_;
  }
  if (data.size() < consumed_) {
    return Fail(ClientHelloStatus::kInvalid, "input shrank between calls");
  }
  // One record at a time until the handshake message is complete; a partial
  // header is checked as far as it goes, so garbage is refused at its first
  // byte rather than after a timeout.
  for (;;) {
    if (!handshake_.empty() && static_cast<uint8_t>(handshake_[0]) != kHandshakeClientHello) {
      return Fail(ClientHelloStatus::kInvalid, "first handshake message is not a ClientHello");
    }
    if (handshake_.size() >= 4) {
      const size_t body_length = (static_cast<size_t>(static_cast<uint8_t>(handshake_[1])) << 16) |
                                 (static_cast<size_t>(static_cast<uint8_t>(handshake_[2])) << 8) |
                                 static_cast<uint8_t>(handshake_[3]);
      // It needs at least one record header besides its bytes.
      if (4 + body_length + kRecordHeaderBytes > max_bytes_) {
        return Fail(ClientHelloStatus::kTooLarge, "ClientHello larger than the limit");
      }
      if (handshake_.size() >= 4 + body_length) {
        status_ = ParseBody(std::string_view(handshake_).substr(4, body_length));
        handshake_.clear();
        handshake_.shrink_to_fit();
        return status_;
      }
    }
    std::string_view rest = data.substr(consumed_);
    if (!rest.empty() && static_cast<uint8_t>(rest[0]) != kRecordHandshake) {
      return Fail(ClientHelloStatus::kInvalid, "not a TLS handshake record");
    }
    if (rest.size() >= 2 && static_cast<uint8_t>(rest[1]) != 3) {
      return Fail(ClientHelloStatus::kInvalid, "record version is not 3.x");
    }
    if (rest.size() < kRecordHeaderBytes) {
      return status_;
    }
    const size_t length =
        (static_cast<size_t>(static_cast<uint8_t>(rest[3])) << 8) | static_cast<uint8_t>(rest[4]);
    if (length == 0 || length > kMaxRecordPayload) {
      return Fail(ClientHelloStatus::kInvalid, "bad record length");
    }
    if (consumed_ + kRecordHeaderBytes + length > max_bytes_) {
      return Fail(ClientHelloStatus::kTooLarge, "ClientHello larger than the limit");
    }
    if (rest.size() < kRecordHeaderBytes + length) {
      return status_;
    }
    handshake_.append(rest.substr(kRecordHeaderBytes, length));
    consumed_ += kRecordHeaderBytes + length;
  }
}

ClientHelloStatus ClientHelloParser::ParseBody(std::string_view body) {
  Reader r(body);
  uint16_t legacy_version = 0;
  std::string_view random, session_id, cipher_suites, compression;
  if (!r.U16(&legacy_version) || !r.Bytes(32, &random) || !r.Vector8(&session_id) ||
      !r.Vector16(&cipher_suites) || !r.Vector8(&compression)) {
    return Fail(ClientHelloStatus::kInvalid, "truncated ClientHello");
  }
  if ((legacy_version >> 8) != 3 || session_id.size() > 32 || cipher_suites.size() < 2 ||
      cipher_suites.size() % 2 != 0 || compression.empty()) {
    return Fail(ClientHelloStatus::kInvalid, "malformed ClientHello");
  }
  if (r.empty()) {
    return ClientHelloStatus::kDone;  // no extensions, hence no SNI
  }
  std::string_view extensions;
  if (!r.Vector16(&extensions) || !r.empty()) {
    return Fail(ClientHelloStatus::kInvalid, "malformed extension list");
  }
  Reader e(extensions);
  bool seen_server_name = false;
  while (!e.empty()) {
    uint16_t type = 0;
    std::string_view payload;
    if (!e.U16(&type) || !e.Vector16(&payload)) {
      return Fail(ClientHelloStatus::kInvalid, "malformed extension");
    }
    if (type != kExtensionServerName) {
      continue;
    }
    if (seen_server_name) {
      return Fail(ClientHelloStatus::kInvalid, "server_name extension repeated");
    }
    seen_server_name = true;
    Reader p(payload);
    std::string_view list;
    if (!p.Vector16(&list) || !p.empty() || list.empty()) {
      return Fail(ClientHelloStatus::kInvalid, "malformed server_name extension");
    }
    Reader l(list);
    while (!l.empty()) {
      uint8_t name_type = 0;
      std::string_view name;
      if (!l.U8(&name_type) || !l.Vector16(&name)) {
        return Fail(ClientHelloStatus::kInvalid, "malformed server_name entry");
      }
      if (name_type != kHostName) {
        continue;  // unknown name types are skipped (RFC 6066 3)
      }
      if (!server_name_.empty()) {
        return Fail(ClientHelloStatus::kInvalid, "more than one host_name");
      }
      if (name.empty() || name.size() > kMaxHostName) {
        return Fail(ClientHelloStatus::kInvalid, "bad host_name length");
      }
      for (char c : name) {
        if (!HostNameChar(c)) {
          return Fail(ClientHelloStatus::kInvalid, "host_name has a character no host name has");
        }
      }
      server_name_.assign(name);
      for (char& c : server_name_) {
        if (c >= 'A' && c <= 'Z') {
          c = static_cast<char>(c - 'A' + 'a');
        }
      }
      if (server_name_.back() == '.') {
        server_name_.pop_back();
      }
      if (server_name_.empty()) {
        return Fail(ClientHelloStatus::kInvalid, "bad host_name");
      }
    }
  }
  return ClientHelloStatus::kDone;
}

}  // namespace kwd::tls
