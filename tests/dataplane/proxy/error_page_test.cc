#include "dataplane/proxy/error_page.h"

#include <gtest/gtest.h>

namespace kwd::proxy {
namespace {

TEST(ErrorPageTest, HtmlPageNamesTheSapCodeAndEscapesTheDetail) {
  std::string out;
  AppendErrorResponse(ErrorCode::kNoServer, "group <x> & co", false, false, false, &out);
  EXPECT_EQ(out.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u);
  EXPECT_NE(out.find("X-Kwd-Error: EDISPATCHERR\r\n"), std::string::npos);
  EXPECT_NE(out.find("group &lt;x&gt; &amp; co"), std::string::npos);
  EXPECT_EQ(out.find("Connection: close"), std::string::npos);
  size_t body = out.find("\r\n\r\n") + 4;
  size_t cl = out.find("Content-Length: ") + 16;
  EXPECT_EQ(std::stoul(out.substr(cl)), out.size() - body);
}

TEST(ErrorPageTest, JsonBodyAndHeadWithoutBody) {
  std::string json;
  AppendErrorResponse(ErrorCode::kDenied, "say \"no\"", true, true, false, &json);
  EXPECT_NE(json.find("Content-Type: application/json"), std::string::npos);
  EXPECT_NE(json.find("{\"status\":403,\"error\":\"EPERM\",\"message\":\"say \\\"no\\\"\""),
            std::string::npos);
  EXPECT_NE(json.find("Connection: close\r\n"), std::string::npos);
  std::string head;
  AppendErrorResponse(ErrorCode::kGatewayTimeout, "slow", false, false, true, &head);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
  EXPECT_NE(head.find("504 Gateway Timeout"), std::string::npos);
}

TEST(ErrorPageTest, StatusMapping) {
  EXPECT_EQ(ErrorInfoFor(ErrorCodeForStatus(431)).status, 431);
  EXPECT_EQ(ErrorInfoFor(ErrorCodeForStatus(413)).status, 413);
  EXPECT_EQ(ErrorInfoFor(ErrorCodeForStatus(505)).status, 505);
  EXPECT_EQ(ErrorInfoFor(ErrorCodeForStatus(400)).sap_code, "EPROTERROR");
}

// A modification rule's redirect: the status and its phrase, the Location,
// an empty body; a CR, LF or NUL never reaches the head (defence: the rule
// engine escapes them already).
TEST(ErrorPageTest, RuleRedirectResponse) {
  std::string out;
  AppendRedirectResponse(308, "https://h.example/p?q=1", &out);
  EXPECT_EQ(out,
            "HTTP/1.1 308 Permanent Redirect\r\nLocation: https://h.example/p?q=1\r\n"
            "Content-Length: 0\r\n\r\n");
  out.clear();
  AppendRedirectResponse(399, std::string("/a\r\nSet-Cookie: x=1\0", 20), &out);
  EXPECT_EQ(out, "HTTP/1.1 399 Redirect\r\nLocation: /aSet-Cookie: x=1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(ErrorInfoFor(ErrorCode::kGone).status, 410);
  EXPECT_EQ(ErrorInfoFor(ErrorCodeForStatus(410)).sap_code, "ENOTFOUND");
  EXPECT_EQ(ErrorInfoFor(ErrorCode::kRuleFailed).sap_code, "EINTERN");
}

// The redirect to https: status line, Location, an empty body.
TEST(ErrorPageTest, RedirectResponse) {
  std::string out;
  AppendRedirectResponse(301, "https://erp.example.com:8443/sap/x?a=%41", &out);
  EXPECT_EQ(out,
            "HTTP/1.1 301 Moved Permanently\r\nLocation: https://erp.example.com:8443/sap/x?a=%41"
            "\r\nContent-Length: 0\r\n\r\n");
  out.clear();
  AppendRedirectResponse(308, "https://h/", &out);
  EXPECT_EQ(out.rfind("HTTP/1.1 308 Permanent Redirect\r\nLocation: https://h/\r\n", 0), 0u);
}

}  // namespace
}  // namespace kwd::proxy
