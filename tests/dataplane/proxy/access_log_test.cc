#include "dataplane/proxy/access_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace kwd::proxy {
namespace {

TEST(AccessLogTest, WritesCommonLogFormatWithRoutingFieldsAndMasks) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  {
    AccessLog log(fds[1]);
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
    e.https = true;
    e.target = "/";
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
            "\"erp/public\" \"erp1_ERP_00\" 1.500 sticky:sap-contextid\n"
            "10.1.2.3 - - [01/Jan/1970:00:00:00 +0000] \"GET / HTTP/1.1\" 200 512 "
            "\"erp/public\" \"erp1_ERP_00\" 1.500 sticky:sap-contextid https\n");
}

}  // namespace
}  // namespace kwd::proxy
