#include "dataplane/tls/client_hello.h"

#include <gtest/gtest.h>

#include <string>

namespace kwd::tls {
namespace {

void Put16(std::string& out, size_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xFF));
}

// A ClientHello handshake message (without record framing) with `sni`
// (none when empty) and `padding` bytes of an extra extension.
std::string HelloMessage(const std::string& sni, size_t padding = 0) {
  std::string body;
  Put16(body, 0x0303);
  body.append(32, 'r');
  body.push_back(0);  // session id
  Put16(body, 2);
  Put16(body, 0x1301);
  body.push_back(1);
  body.push_back(0);
  std::string extensions;
  if (!sni.empty()) {
    Put16(extensions, 0);
    Put16(extensions, sni.size() + 5);
    Put16(extensions, sni.size() + 3);
    extensions.push_back(0);
    Put16(extensions, sni.size());
    extensions += sni;
  }
  if (padding > 0) {
    Put16(extensions, 21);
    Put16(extensions, padding);
    extensions.append(padding, '\0');
  }
  Put16(body, extensions.size());
  body += extensions;
  std::string message;
  message.push_back(1);
  message.push_back(static_cast<char>(body.size() >> 16));
  Put16(message, body.size() & 0xFFFF);
  return message + body;
}

// `message` framed into handshake records of at most `record_size` bytes.
std::string Records(const std::string& message, size_t record_size = 16384) {
  std::string out;
  for (size_t i = 0; i < message.size(); i += record_size) {
    std::string part = message.substr(i, record_size);
    out.push_back(22);
    out.push_back(3);
    out.push_back(1);
    Put16(out, part.size());
    out += part;
  }
  return out;
}

TEST(ClientHelloTest, ReadsTheServerNameLowercasedWithoutTrailingDot) {
  ClientHelloParser parser;
  EXPECT_EQ(parser.Feed(Records(HelloMessage("Erp.Example.COM."))), ClientHelloStatus::kDone);
  EXPECT_EQ(parser.server_name(), "erp.example.com");
}

TEST(ClientHelloTest, NoServerNameIsDoneWithAnEmptyName) {
  ClientHelloParser parser;
  EXPECT_EQ(parser.Feed(Records(HelloMessage(""))), ClientHelloStatus::kDone);
  EXPECT_EQ(parser.server_name(), "");
}

TEST(ClientHelloTest, ByteByByteAndOverManyRecords) {
  for (size_t record_size : {1, 3, 50, 16384}) {
    std::string wire = Records(HelloMessage("a.example.com", 300), record_size);
    ClientHelloParser parser;
    ClientHelloStatus status = ClientHelloStatus::kNeedMore;
    for (size_t n = 1; n <= wire.size(); ++n) {
      status = parser.Feed(std::string_view(wire).substr(0, n));
      if (n < wire.size()) {
        ASSERT_EQ(status, ClientHelloStatus::kNeedMore) << record_size << " at " << n;
      }
    }
    EXPECT_EQ(status, ClientHelloStatus::kDone) << record_size;
    EXPECT_EQ(parser.server_name(), "a.example.com");
  }
}

TEST(ClientHelloTest, GarbageIsRefusedAtTheFirstByte) {
  ClientHelloParser parser;
  EXPECT_EQ(parser.Feed("G"), ClientHelloStatus::kInvalid);
  ClientHelloParser sslv2;
  EXPECT_EQ(sslv2.Feed("\x80\x2e\x01"), ClientHelloStatus::kInvalid);
  ClientHelloParser alert;
  EXPECT_EQ(alert.Feed(std::string("\x15\x03\x01\x00\x02\x02\x28", 7)),
            ClientHelloStatus::kInvalid);
}

TEST(ClientHelloTest, AnotherHandshakeMessageIsRefused) {
  std::string message = HelloMessage("a.example.com");
  message[0] = 2;  // ServerHello
  ClientHelloParser parser;
  EXPECT_EQ(parser.Feed(Records(message)), ClientHelloStatus::kInvalid);
}

TEST(ClientHelloTest, OversizedIsRefusedFromItsHeader) {
  ClientHelloParser parser(4096);
  std::string wire = Records(HelloMessage("a.example.com", 8000));
  // The handshake header alone says it cannot fit.
  EXPECT_EQ(parser.Feed(wire.substr(0, 9)), ClientHelloStatus::kTooLarge);
  ClientHelloParser fits(16384);
  EXPECT_EQ(fits.Feed(wire), ClientHelloStatus::kDone);
}

TEST(ClientHelloTest, MalformedVectorsAndNamesAreRefused) {
  std::string message = HelloMessage("a.example.com");
  // Truncated: the message length claims more than the vectors hold.
  std::string truncated = message.substr(0, message.size() - 3);
  truncated[3] = static_cast<char>(truncated.size() - 4);
  truncated[2] = 0;
  ClientHelloParser a;
  EXPECT_EQ(a.Feed(Records(truncated)), ClientHelloStatus::kInvalid);
  ClientHelloParser b;
  EXPECT_EQ(b.Feed(Records(HelloMessage("bad name"))), ClientHelloStatus::kInvalid);
  ClientHelloParser c;
  EXPECT_EQ(c.Feed(Records(HelloMessage("a\r\nb"))), ClientHelloStatus::kInvalid);
  ClientHelloParser zero_record;
  EXPECT_EQ(zero_record.Feed(std::string("\x16\x03\x01\x00\x00", 5)), ClientHelloStatus::kInvalid);
}

TEST(ClientHelloTest, ResultStaysOnceDecided) {
  ClientHelloParser parser;
  std::string wire = Records(HelloMessage("a.example.com"));
  ASSERT_EQ(parser.Feed(wire), ClientHelloStatus::kDone);
  EXPECT_EQ(parser.Feed(wire + "more bytes"), ClientHelloStatus::kDone);
}

}  // namespace
}  // namespace kwd::tls
