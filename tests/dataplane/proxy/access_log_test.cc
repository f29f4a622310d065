#include "dataplane/proxy/access_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace kwd::proxy {
namespace {

TEST(AccessLogTest, WritesCommonLogFormatWithRoutingFieldsAndMasks) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  {
    AccessLog log(fds[1], LogFormat::kText);
    AccessLogEntry e;
    e.client_ip = "10.1.2.3";
    e.method = "GET";
    e.target = "/sap/bc/x;jsessionid=abc?sap-contextid=SID%3aANON%3aA%3ax&q=\"1\"";
    e.status = 200;
    e.bytes_sent = 512;
    e.group = "erp/public";
    e.server = "erp1_ERP_00";
    e.duration_ms = 1.5;
    e.reason = "sticky:sap-contextid";
    log.Write(e, 0);
  }  // flushed on destruction
  close(fds[1]);
  char buf[1024];
  ssize_t n = read(fds[0], buf, sizeof buf);
  close(fds[0]);
  ASSERT_GT(n, 0);
  std::string line(buf, n);
  EXPECT_EQ(line,
            "10.1.2.3 - - [01/Jan/1970:00:00:00 +0000] \"GET "
            "/sap/bc/x;jsessionid=***?sap-contextid=***&q=?1? HTTP/1.1\" 200 512 "
            "\"erp/public\" \"erp1_ERP_00\" 1.500 sticky:sap-contextid - - - -\n");
}

std::string WriteOne(const AccessLogEntry& entry, LogFormat format) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  {
    AccessLog log(fds[1], format);
    log.Write(entry, 0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) {
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  return out;
}

AccessLogEntry FullEntry() {
  AccessLogEntry e;
  e.client_ip = "10.1.2.3";
  e.method = "POST";
  e.target = "/sap/bc/x?sap-contextid=SID&q=\"1\"\x01\xff";
  e.version_minor = 0;
  e.status = 502;
  e.bytes_sent = 10;
  e.bytes_received = 20;
  e.group = "erp/public";
  e.server = "erp1_ERP_00";
  e.duration_ms = 1.25;
  e.upstream_ms = 0.5;
  e.reason = "balance,aborted-upstream";
  e.request_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  e.trace_id = "0af7651916cd43dd8448eb211c80319c";
  e.tls_version = "TLSv1.3";
  return e;
}

TEST(AccessLogTest, TextLineEndsWithUpstreamTimeRequestAndTraceIdsAndTlsVersion) {
  std::string line = WriteOne(FullEntry(), LogFormat::kText);
  EXPECT_NE(line.find("\" 502 10 \"erp/public\" \"erp1_ERP_00\" 1.250 balance,aborted-upstream "
                      "0.500 4bf92f3577b34da6a3ce929d0e0e4736 0af7651916cd43dd8448eb211c80319c TLSv1.3\n"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(" HTTP/1.0\" "), std::string::npos) << line;
}

// --log-format json: one JSON object per line; absent values are null; the
// target is masked and escaped (a quote, a control character and a byte that
// is not UTF-8 in it).
// A request rejected before its method and target were parsed (a malformed
// or too large head, a head that never came): the request field is "-", as
// Common Log Format writes a missing request line, not "-  HTTP/1.1".
TEST(AccessLogTest, RequestWithoutARequestLineIsLoggedAsADash) {
  AccessLogEntry e;
  e.client_ip = "10.1.2.3";
  e.status = 400;
  e.bytes_sent = 100;
  e.reason = "bad-request";
  EXPECT_EQ(WriteOne(e, LogFormat::kText),
            "10.1.2.3 - - [01/Jan/1970:00:00:00 +0000] \"-\" 400 100 \"-\" \"-\" 0.000 "
            "bad-request - - - -\n");
  std::string json = WriteOne(e, LogFormat::kJson);
  EXPECT_NE(json.find(R"("method":null,"target":null,)"), std::string::npos) << json;
}

TEST(AccessLogTest, JsonLineHasEveryField) {
  std::string line = WriteOne(FullEntry(), LogFormat::kJson);
  ASSERT_EQ(line.find('\n'), line.size() - 1) << line;
  EXPECT_EQ(line.rfind("{\"ts\":\"", 0), 0u) << line;
  for (const char* field :
       {R"("client_ip":"10.1.2.3")", R"("method":"POST")",
        R"("target":"/sap/bc/x?sap-contextid=***&q=\"1\"\u0001\\xff")", R"("protocol":"HTTP/1.0")",
        R"("status":502)", R"("bytes_sent":10)", R"("bytes_received":20)",
        R"("group":"erp/public")", R"("server":"erp1_ERP_00")", R"("duration_ms":1.250)",
        R"("upstream_ms":0.500)", R"("reason":"balance,aborted-upstream")",
        R"("request_id":"4bf92f3577b34da6a3ce929d0e0e4736")",
        R"("trace_id":"0af7651916cd43dd8448eb211c80319c")", R"("tls_version":"TLSv1.3"})"}) {
    EXPECT_NE(line.find(field), std::string::npos) << field << "\n" << line;
  }
  AccessLogEntry bare;
  bare.status = 400;
  std::string minimal = WriteOne(bare, LogFormat::kJson);
  for (const char* field :
       {R"("client_ip":null)", R"("server":null)", R"("upstream_ms":null)",
        R"("request_id":null)", R"("trace_id":null)", R"("tls_version":null})"}) {
    EXPECT_NE(minimal.find(field), std::string::npos) << field << "\n" << minimal;
  }
}

}  // namespace
}  // namespace kwd::proxy
