#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/support/temp_path.h"

namespace kwd {
namespace {

// The lines Log writes to stderr while `write` runs.
template <typename F>
std::string CaptureStderr(F write) {
  std::string path = testing::UniqueTempPath("log_test.txt");
  std::FILE* file = std::fopen(path.c_str(), "w+");
  EXPECT_NE(file, nullptr);
  int saved = ::dup(STDERR_FILENO);
  ::dup2(::fileno(file), STDERR_FILENO);
  write();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::fclose(file);
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Values from objects (server, group, host names; error texts that quote
// them) end up in log fields: one log line must stay one line, and no
// control character reaches the terminal or the log collector raw.
TEST(LogTest, ControlCharactersInValuesAreEscaped) {
  std::string text = CaptureStderr([] {
    Log(LogLevel::kError, "proxy", "snapshot rejected\r\nlevel=info msg=forged",
        {{"server", "B\r\nSet-Cookie: evil=1"},
         {"group", std::string_view("erp/\t\x1b[31mred\x7f\0", 15)},
         {"plain", "erp1_ERP_00"},
         {"quoted", "a \"b\" c\\d"}});
  });
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.find('\n'), text.size() - 1) << text;  // exactly one line
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x7f'), std::string::npos) << text;
  EXPECT_EQ(text.find('\t'), std::string::npos) << text;
  EXPECT_EQ(text.find('\0'), std::string::npos) << text;
  EXPECT_NE(text.find(R"(msg="snapshot rejected\r\nlevel=info msg=forged")"), std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(server="B\r\nSet-Cookie: evil=1")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(group="erp/\t\x1b[31mred\x7f\x00")"), std::string::npos) << text;
  EXPECT_NE(text.find(" plain=erp1_ERP_00"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(quoted="a \"b\" c\\d")"), std::string::npos) << text;
}

// --log-format json: one JSON object per line, every field a string, with
// control characters, quotes and bytes that are not UTF-8 escaped so that any
// JSON parser reads the line back.
TEST(LogTest, JsonFormatWritesOneValidObjectPerLine) {
  SetLogFormat(LogFormat::kJson);
  std::string text = CaptureStderr([] {
    Log(LogLevel::kWarn, "proxy", "server \"a\"\r\ndown",
        {{"server", std::string_view("B\x01\xff\xc3\xa9\\", 6)}, {"group", "erp/public"}});
  });
  SetLogFormat(LogFormat::kText);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.find('\n'), text.size() - 1) << text;
  EXPECT_EQ(text.rfind("{\"ts\":\"", 0), 0u) << text;
  EXPECT_NE(text.find(R"("level":"warn","component":"proxy","msg":"server \"a\"\r\ndown")"),
            std::string::npos)
      << text;
  // \x01 as \u0001, the stray byte 0xff as the text \xff, é kept as UTF-8.
  EXPECT_NE(text.find(R"("server":"B\u0001\\xffé\\")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("group":"erp/public"})"), std::string::npos) << text;
}

TEST(LogTest, ParsesLogFormats) {
  LogFormat format = LogFormat::kText;
  EXPECT_TRUE(ParseLogFormat("json", &format));
  EXPECT_EQ(format, LogFormat::kJson);
  EXPECT_TRUE(ParseLogFormat("text", &format));
  EXPECT_EQ(format, LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("JSON", &format));
  EXPECT_FALSE(ParseLogFormat("", &format));
}

}  // namespace
}  // namespace kwd
