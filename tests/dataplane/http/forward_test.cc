#include "dataplane/http/forward.h"

#include <gtest/gtest.h>

#include <string>

namespace kwd::http {
namespace {

struct Parsed {
  RequestHead head;
  RequestInfo info;
};

void ParseRequest(std::string_view text, Parsed* p) {
  RequestParser parser;
  ASSERT_TRUE(parser.Parse(text, &p->head).complete()) << text;
  ASSERT_TRUE(AnalyzeRequest(p->head, {}, &p->info).ok()) << text;
}

TEST(SerializeRequestHead, StripsHopByHopAndAddsForwardedFields) {
  Parsed p;
  ParseRequest(
      "POST /sap/bc/x?a=1 HTTP/1.1\r\n"
      "Host: erp.example\r\n"
      "Connection: keep-alive, X-Secret, Content-Length\r\n"
      "Keep-Alive: timeout=5\r\n"
      "Proxy-Connection: keep-alive\r\n"
      "TE: trailers\r\n"
      "Trailer: X-T\r\n"
      "X-Secret: s\r\n"
      "Upgrade: h2c\r\n"
      "X-Forwarded-For: 10.0.0.1\r\n"
      "X-Forwarded-Proto: https\r\n"
      "X-Forwarded-Host: evil\r\n"
      "SSL_CLIENT_CERT: forged\r\n"
      "ssl-client-cert-chain-1: forged\r\n"
      "Content-Length: 3\r\n"
      "Cookie: a=b\r\n"
      "\r\n",
      &p);
  ForwardRequestOptions options;
  options.client_ip = "192.0.2.7";
  options.keep_forwarded_for = true;  // the peer is a trusted proxy
  std::string out;
  SerializeRequestHead(p.head, p.info, options, out);
  EXPECT_EQ(out,
            "POST /sap/bc/x?a=1 HTTP/1.1\r\n"
            "Host: erp.example\r\n"
            "Content-Length: 3\r\n"
            "Cookie: a=b\r\n"
            "X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"
            "X-Forwarded-Proto: http\r\n"
            "X-Forwarded-Host: erp.example\r\n"
            "\r\n");
  // From a peer that is not a trusted proxy the client's own X-Forwarded-For
  // is dropped: the server sees only the address the proxy saw.
  options.keep_forwarded_for = false;
  out.clear();
  SerializeRequestHead(p.head, p.info, options, out);
  EXPECT_NE(out.find("X-Forwarded-For: 192.0.2.7\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("10.0.0.1"), std::string::npos) << out;
}

// Issue 23 item 9: every field that says who the client is, in every
// spelling, passes only from a trusted proxy; other spellings never.
constexpr std::string_view kForgedForwarding =
    "GET / HTTP/1.1\r\n"
    "Host: erp.example\r\n"
    "Forwarded: for=203.0.113.9;proto=https\r\n"
    "X-Real-IP: 203.0.113.9\r\n"
    "X-Forwarded-Port: 443\r\n"
    "ClientProtocol: https\r\n"
    "x-sap-webdisp-ap: HTTP=1,HTTPS=2\r\n"
    "X_Forwarded_For: 203.0.113.9\r\n"
    "X_Forwarded_Proto: https\r\n"
    "Client-Protocol: https\r\n"
    "X_Real_IP: 203.0.113.9\r\n"
    "X-Keep: 1\r\n"
    "\r\n";

TEST(SerializeRequestHead, ForwardingFieldsFromUntrustedClientsAreDropped) {
  Parsed p;
  ParseRequest(kForgedForwarding, &p);
  ForwardRequestOptions options;
  options.client_ip = "192.0.2.7";
  std::string out;
  SerializeRequestHead(p.head, p.info, options, out);
  EXPECT_EQ(out,
            "GET / HTTP/1.1\r\n"
            "Host: erp.example\r\n"
            "X-Keep: 1\r\n"
            "X-Forwarded-For: 192.0.2.7\r\n"
            "X-Forwarded-Proto: http\r\n"
            "X-Forwarded-Host: erp.example\r\n"
            "\r\n");
  // SAP's fields, when the group wants them, are the proxy's.
  options.client_protocol = "http";
  options.access_points = "HTTP=8080,HTTPS=8443";
  SerializeRequestHead(p.head, p.info, options, out);
  EXPECT_NE(out.find("\r\nClientProtocol: http\r\nx-sap-webdisp-ap: HTTP=8080,HTTPS=8443\r\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("203.0.113.9"), std::string::npos) << out;
  EXPECT_EQ(out.find("https"), std::string::npos) << out;
  EXPECT_EQ(out.find("HTTP=1"), std::string::npos) << out;
}

TEST(SerializeRequestHead, ForwardingFieldsFromTrustedProxiesPassButNotOtherSpellings) {
  Parsed p;
  ParseRequest(kForgedForwarding, &p);
  ForwardRequestOptions options;
  options.client_ip = "10.0.0.2";
  options.keep_forwarded_for = true;
  options.client_protocol = "http";
  options.access_points = "HTTP=8080";
  std::string out;
  SerializeRequestHead(p.head, p.info, options, out);
  for (std::string_view kept :
       {"\r\nForwarded: for=203.0.113.9;proto=https\r\n", "\r\nX-Real-IP: 203.0.113.9\r\n",
        "\r\nX-Forwarded-Port: 443\r\n", "\r\nClientProtocol: https\r\n",
        "\r\nx-sap-webdisp-ap: HTTP=1,HTTPS=2\r\n"}) {
    EXPECT_NE(out.find(kept), std::string::npos) << kept << out;
  }
  // SAP's SetHeaderIfEmpty: the trusted proxy's values stand, ours are not added.
  EXPECT_EQ(out.find("ClientProtocol: http\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("HTTP=8080"), std::string::npos) << out;
  for (std::string_view dropped :
       {"X_Forwarded_For", "X_Forwarded_Proto", "Client-Protocol", "X_Real_IP"}) {
    EXPECT_EQ(out.find(dropped), std::string::npos) << dropped << out;
  }
}

TEST(SerializeRequestHead, RepeatedOrListedContentLengthGoesOnAsOneValue) {
  // Framing accepts "5, 5" and repeated fields with one value; the next hop
  // gets a single plain field wherever the first one was.
  Parsed p;
  ParseRequest(
      "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5 ,5\r\nX-A: 1\r\n"
      "content-length: 5\r\n\r\n",
      &p);
  std::string out;
  SerializeRequestHead(p.head, p.info, {}, out);
  EXPECT_NE(out.find("\r\nContent-Length: 5\r\nX-A: 1\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("5 ,5"), std::string::npos) << out;
  EXPECT_EQ(out.find("content-length"), std::string::npos) << out;
}

TEST(SerializeRequestHead, TransferEncodingKeptUnlessReframed) {
  Parsed p;
  ParseRequest("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", &p);
  std::string out;
  SerializeRequestHead(p.head, p.info, {}, out);
  EXPECT_NE(out.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  ForwardRequestOptions reframe;
  reframe.reframe_body = true;
  const Header length[] = {{"Content-Length", "5"}};
  reframe.extra_headers = length;
  SerializeRequestHead(p.head, p.info, reframe, out);
  EXPECT_EQ(out.find("Transfer-Encoding"), std::string::npos);
  EXPECT_NE(out.find("Content-Length: 5\r\n\r\n"), std::string::npos);
}

TEST(SerializeRequestHead, AbsoluteFormBecomesOriginFormAndWebSocketTunnels) {
  Parsed p;
  ParseRequest(
      "GET http://abs.example:8000?q=1 HTTP/1.1\r\nHost: ignored\r\nConnection: Upgrade\r\n"
      "Upgrade: websocket\r\n\r\n",
      &p);
  ForwardRequestOptions options;
  options.proto = "https";
  options.tunnel_upgrade = true;
  std::string out;
  SerializeRequestHead(p.head, p.info, options, out);
  EXPECT_EQ(out,
            "GET /?q=1 HTTP/1.1\r\n"
            "Host: abs.example:8000\r\n"
            "Upgrade: websocket\r\n"
            "X-Forwarded-Proto: https\r\n"
            "X-Forwarded-Host: abs.example:8000\r\n"
            "Connection: Upgrade\r\n"
            "\r\n");
}

TEST(SerializeRequestHead, SendsTheTargetTheRoutingDecidedOn) {
  Parsed p;
  ParseRequest("GET /sap/admin/q(/a)/../../x?y=1 HTTP/1.1\r\nHost: h\r\n\r\n", &p);
  ForwardRequestOptions options;
  options.target = "/sap/admin/x?y=1";
  std::string out;
  SerializeRequestHead(p.head, p.info, options, out);
  EXPECT_EQ(out.rfind("GET /sap/admin/x?y=1 HTTP/1.1\r\n", 0), 0u) << out;
  ParseRequest("GET http://abs.example/a/../b HTTP/1.1\r\nHost: h\r\n\r\n", &p);
  options.target = "/b";
  SerializeRequestHead(p.head, p.info, options, out);
  EXPECT_EQ(out.rfind("GET /b HTTP/1.1\r\nHost: abs.example\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("X-Forwarded-Host: abs.example\r\n"), std::string::npos) << out;
}

TEST(SerializeResponseHead, StripsHopByHopAndSetsConnection) {
  ResponseParser parser;
  ResponseHead head;
  ASSERT_TRUE(parser
                  .Parse("HTTP/1.0 200 OK\r\nConnection: X-Internal\r\nX-Internal: 1\r\n"
                         "Keep-Alive: timeout=3\r\nContent-Length: 2\r\nSet-Cookie: a=b\r\n\r\n",
                         &head)
                  .complete());
  ForwardResponseOptions options;
  options.connection = "close";
  std::string out;
  SerializeResponseHead(head, options, out);
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: a=b\r\nConnection: close\r\n\r\n");
}

TEST(SerializeResponseHead, CopiesRunsOfReceivedLinesAsTheFieldsWouldBeWritten) {
  // Lines written as the serialiser would ("name: value") are copied in runs;
  // the others (extra or missing space, trailing space, a lower-case or
  // repeated Content-Length) come out normalised, dropped ones break a run.
  ResponseParser parser;
  ResponseHead head;
  ASSERT_TRUE(parser
                  .Parse("HTTP/1.1 200 OK\r\nServer: a\r\nDate: b\r\nConnection: x\r\n"
                         "X-One:1\r\nX-Two:  2 \r\ncontent-length: 5\r\nX-Three: 3\r\n"
                         "Content-Length: 5\r\nY: \r\nX-Empty:\r\nKeep-Alive: t\r\nLast: z\r\n\r\n",
                         &head)
                  .complete());
  EXPECT_TRUE(head.headers[0].canonical);
  EXPECT_FALSE(head.headers[3].canonical);
  EXPECT_FALSE(head.headers[4].canonical);
  ForwardResponseOptions options;
  std::string out;
  SerializeResponseHead(head, options, out);
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nServer: a\r\nDate: b\r\nX-One: 1\r\nX-Two: 2\r\n"
            "Content-Length: 5\r\nX-Three: 3\r\nY: \r\nX-Empty: \r\nLast: z\r\n\r\n");
}

TEST(SerializeResponseHead, SwitchingProtocolsKeepsUpgrade) {
  ResponseParser parser;
  ResponseHead head;
  ASSERT_TRUE(parser
                  .Parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n",
                         &head)
                  .complete());
  ForwardResponseOptions options;
  options.tunnel_upgrade = true;
  std::string out;
  SerializeResponseHead(head, options, out);
  EXPECT_EQ(out,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: x\r\n"
            "Connection: Upgrade\r\n\r\n");
}

TEST(SerializeResponseHead, InterimResponseCarriesNoFraming) {
  // RFC 9110 8.6 and RFC 9112 6.1: no Content-Length or Transfer-Encoding in
  // a 1xx response; a server's are not passed on to the client (its next
  // response's framing is the final response's own).
  ResponseParser parser;
  ResponseHead head;
  ASSERT_TRUE(parser
                  .Parse("HTTP/1.1 103 Early Hints\r\nContent-Length: 5\r\nLink: </a>\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n",
                         &head)
                  .complete());
  std::string out;
  SerializeResponseHead(head, ForwardResponseOptions{}, out);
  EXPECT_EQ(out, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n");
  ResponseParser upgrade_parser;
  ResponseHead upgrade;
  ASSERT_TRUE(upgrade_parser
                  .Parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nContent-Length: 0\r\n\r\n",
                         &upgrade)
                  .complete());
  ForwardResponseOptions options;
  options.tunnel_upgrade = true;
  SerializeResponseHead(upgrade, options, out);
  EXPECT_EQ(out,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "\r\n");
}

TEST(IsHopByHop, FixedListAndNominated) {
  const Header fields[] = {{"Connection", "x-a, close"}, {"X-A", "1"}};
  EXPECT_TRUE(IsHopByHop("keep-alive", fields));
  EXPECT_TRUE(IsHopByHop("TE", fields));
  EXPECT_TRUE(IsHopByHop("x-a", fields));
  EXPECT_FALSE(IsHopByHop("x-b", fields));
}

}  // namespace
}  // namespace kwd::http
