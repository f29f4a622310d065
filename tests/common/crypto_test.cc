#include "common/crypto.h"

#include <gtest/gtest.h>

namespace kwd {
namespace {

TEST(CryptoTest, Sha256OfEmptyStringIsTheKnownVector) {
  EXPECT_EQ(HexEncode(Sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(CryptoTest, HmacSha256MatchesRfc4231Case2) {
  EXPECT_EQ(HexEncode(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(CryptoTest, Base64EncodeIsStandardAndPadded) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode("\xfb\xff"), "+/8=");  // not the URL alphabet
  const std::string binary("\0\x01\xfe\xff tls.key", 12);
  std::string back(binary.size(), '\0');
  EXPECT_EQ(Base64Decode(Base64Encode(binary), back.data(), back.size()),
            static_cast<int>(binary.size()));
  EXPECT_EQ(back, binary);
}

TEST(CryptoTest, Base64UrlRoundTrip) {
  for (std::string s : {"", "f", "fo", "foo", "foob", "fooba", "foobar", "\xff\xfe\xfd"}) {
    std::string enc = Base64UrlEncode(s);
    EXPECT_EQ(enc.find('='), std::string::npos);
    char buf[16];
    int n = Base64Decode(enc, buf, sizeof buf);
    ASSERT_EQ(n, static_cast<int>(s.size())) << enc;
    EXPECT_EQ(std::string(buf, n), s);
  }
  EXPECT_EQ(Base64UrlEncode("foobar"), "Zm9vYmFy");
}

TEST(CryptoTest, Base64DecodesTheSapBracketExample) {
  char buf[64];
  int n = Base64Decode("bD1lbiZjPTAwMQ==", buf, sizeof buf);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, n), "l=en&c=001");
}

TEST(CryptoTest, Base64RejectsBadInputAndOverflow) {
  char buf[4];
  EXPECT_EQ(Base64Decode("a", buf, sizeof buf), -1);
  EXPECT_EQ(Base64Decode("ab$d", buf, sizeof buf), -1);
  EXPECT_EQ(Base64Decode("Zm9vYmFy", buf, 3), -1);
}

TEST(CryptoTest, ConstantTimeEqual) {
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "ab"));
}

}  // namespace
}  // namespace kwd
