// Counts operator new across parsing, framing, chunked decoding, masking and
// forwarding into a warmed-up buffer: the steady-state request path must not
// allocate.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "dataplane/http/access_log_mask.h"
#include "dataplane/http/chunked.h"
#include "dataplane/http/forward.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) {
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace kwd::http {
namespace {

TEST(Allocations, NoneOnTheRequestPath) {
  const std::string request =
      "POST /sap/bc/x;jsessionid=abc?sap-contextid=y HTTP/1.1\r\nHost: erp\r\n"
      "Cookie: MYSAPSSO2=t; a=b\r\nTransfer-Encoding: chunked\r\nX-Forwarded-For: 10.0.0.1\r\n"
      "\r\n5;e=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n";
  static RequestHead head;
  static RequestInfo info;
  std::string forwarded;
  std::string log_line;
  forwarded.reserve(4096);
  log_line.reserve(4096);
  ForwardRequestOptions options;
  options.client_ip = "192.0.2.1";
  options.keep_forwarded_for = true;

  long before = g_allocations.load();
  size_t body_bytes = 0;
  for (int round = 0; round < 3; ++round) {
    RequestParser parser;
    // Incremental: the buffer grows in place (capacity reserved up front by
    // the connection), the parser is called for every piece.
    for (size_t n = 1; n <= request.size(); n += 9) {
      ParseResult partial = parser.Parse(std::string_view(request).substr(0, n), &head);
      if (!partial.partial()) {
        break;
      }
    }
    ParseResult r = parser.Parse(request, &head);
    ASSERT_TRUE(r.complete());
    ASSERT_TRUE(AnalyzeRequest(head, {}, &info).ok());
    ChunkedDecoder decoder;
    std::string_view rest = std::string_view(request).substr(r.consumed);
    while (true) {
      ChunkedResult c = decoder.Decode(rest);
      rest.remove_prefix(c.consumed);
      body_bytes += c.data.size();
      if (c.status != ChunkedStatus::kData) {
        ASSERT_EQ(c.status, ChunkedStatus::kDone);
        break;
      }
    }
    SerializeRequestHead(head, info, options, forwarded);
    log_line.clear();
    AppendMaskedTarget(head.target, log_line);
    AppendMaskedFieldValue("cookie", head.Find("cookie")->value, log_line);
  }
  long after = g_allocations.load();
  EXPECT_EQ(after - before, 0);
  EXPECT_EQ(body_bytes, 15u);
  EXPECT_NE(log_line.find("jsessionid=***"), std::string::npos);
  EXPECT_NE(forwarded.find("X-Forwarded-For: 10.0.0.1, 192.0.2.1\r\n"), std::string::npos);
}

TEST(Allocations, CounterWorks) {
  long before = g_allocations.load();
  // A direct call: new-expressions may be elided by the optimiser.
  void* volatile p = ::operator new(16);
  ::operator delete(p);
  EXPECT_EQ(g_allocations.load() - before, 1);
}

}  // namespace
}  // namespace kwd::http
