#include "dataplane/http/chunked.h"

#include <gtest/gtest.h>

#include <string>

namespace kwd::http {
namespace {

struct Decoded {
  ChunkedStatus status = ChunkedStatus::kNeedMore;
  std::string body;
  size_t consumed = 0;  // of the whole input, when done
  int http_status = 0;
  int data_spans = 0;
};

// Feeds the input in pieces of `step` bytes (0: all at once).
Decoded DecodeAll(std::string_view input, size_t step, ChunkedLimits limits = {}) {
  ChunkedDecoder decoder(limits);
  Decoded d;
  size_t offset = 0;
  size_t available = step == 0 ? input.size() : std::min(step, input.size());
  while (true) {
    ChunkedResult r = decoder.Decode(input.substr(offset, available - offset));
    offset += r.consumed;
    if (r.status == ChunkedStatus::kData) {
      d.body.append(r.data);
      ++d.data_spans;
      // Zero-copy: the span lies inside the input.
      EXPECT_GE(r.data.data(), input.data());
      EXPECT_LE(r.data.data() + r.data.size(), input.data() + input.size());
      continue;
    }
    if (r.status == ChunkedStatus::kNeedMore && available < input.size()) {
      available = step == 0 ? input.size() : std::min(available + step, input.size());
      continue;
    }
    d.status = r.status;
    d.consumed = offset;
    d.http_status = r.http_status;
    return d;
  }
}

TEST(ChunkedDecoder, DecodesChunksExtensionsAndTrailers) {
  std::string_view body =
      "4\r\nWiki\r\n5;a=b;c=\"d e\"\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX: y\r\n\r\nNEXT";
  for (size_t step : {0, 1, 3}) {
    Decoded d = DecodeAll(body, step);
    ASSERT_EQ(d.status, ChunkedStatus::kDone) << step;
    EXPECT_EQ(d.body, "Wikipedia in\r\n\r\nchunks.") << step;
    EXPECT_EQ(body.substr(d.consumed), "NEXT") << step;
  }
}

TEST(ChunkedDecoder, AcceptsEveryExtensionFormOfTheGrammar) {
  const std::string_view lines[] = {
      "2;a",
      "2;a=b",
      "2 ;a",
      "2\t; a = b",
      "2;a;b=c;d",
      "2;a=\"\"",
      "2;a=\"b c;d=e\"",
      "2;a=\"q\\\"uote\\\\\"",
      "2;a=\"b\" ;c",
      "2;!#$%&'*+-.^_`|~=x",
  };
  for (std::string_view line : lines) {
    std::string input = std::string(line) + "\r\nab\r\n0\r\n\r\n";
    for (size_t step : {0, 1}) {
      Decoded d = DecodeAll(input, step);
      EXPECT_EQ(d.status, ChunkedStatus::kDone) << line << " step " << step;
      EXPECT_EQ(d.body, "ab") << line;
    }
  }
}

TEST(ChunkedDecoder, UppercaseAndLeadingZeroSizes) {
  Decoded d = DecodeAll("00A\r\n0123456789\r\n000\r\n\r\n", 0);
  ASSERT_EQ(d.status, ChunkedStatus::kDone);
  EXPECT_EQ(d.body, "0123456789");
}

TEST(ChunkedDecoder, YieldsDataAsItArrives) {
  ChunkedDecoder decoder;
  ChunkedResult r = decoder.Decode("a\r\nhel");
  ASSERT_EQ(r.status, ChunkedStatus::kData);
  EXPECT_EQ(r.data, "hel");
  EXPECT_EQ(r.consumed, 6u);
  r = decoder.Decode("");
  EXPECT_EQ(r.status, ChunkedStatus::kNeedMore);
  r = decoder.Decode("lo worl");
  ASSERT_EQ(r.status, ChunkedStatus::kData);
  EXPECT_EQ(r.data, "lo worl");
  EXPECT_EQ(decoder.body_bytes(), 10u);
}

TEST(ChunkedDecoder, Errors) {
  struct Case {
    std::string_view name;
    std::string input;
    int status;
    ParseError error;
  };
  ChunkedLimits limits;
  limits.max_body_bytes = 16;
  const Case cases[] = {
      {"0x", "0x5\r\nhello\r\n0\r\n\r\n", 400, ParseError::kBadChunkSize},
      {"negative", "-1\r\n", 400, ParseError::kBadChunkSize},
      {"empty", "\r\n", 400, ParseError::kBadChunkSize},
      {"overflow", "1ffffffffffffffff\r\n", 400, ParseError::kBadChunkSize},
      {"over_limit_single", "11\r\n", 413, ParseError::kBodyTooLarge},
      {"over_limit_running", "8\r\n12345678\r\n9\r\n", 413, ParseError::kBodyTooLarge},
      {"missing_crlf", "1\r\nab\r\n", 400, ParseError::kMissingChunkCrlf},
      {"missing_lf", "1\r\na\rb", 400, ParseError::kMissingChunkCrlf},
      {"ext_control", "1;a\x01\r\n", 400, ParseError::kBadChunkExtension},
      {"ws_no_ext", "1 x\r\n", 400, ParseError::kBadChunkExtension},
      // RFC 9112 7.1.1: `*( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )`.
      {"ext_empty", "2;\r\nab\r\n0\r\n\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_no_name", "2;=x\r\nab\r\n0\r\n\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_only_space", "2; \r\nab\r\n0\r\n\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_trailing_space", "2;a \r\nab\r\n0\r\n\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_value_trailing_space", "2;a=b \r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_empty_value", "2;a=\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_double_semicolon", "2;a;;b\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_unbalanced_quote", "2;a=\"b\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_quote_in_token", "2;a=b\"c\"\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_after_quote", "2;a=\"b\"c\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_escaped_close", "2;a=\"b\\\"\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_separator_in_name", "2;a/b=c\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_separator_in_value", "2;a=b/c\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_two_values", "2;a=b=c\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_bare_lf", "2;a\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"ext_quoted_ctl", "2;a=\"\x01\"\r\nab\r\n", 400, ParseError::kBadChunkExtension},
      {"line_too_long", "1;" + std::string(5000, 'x') + "\r\n", 400, ParseError::kChunkLineTooLong},
      {"bad_trailer_name", "0\r\nX(: y\r\n\r\n", 400, ParseError::kBadTrailer},
      {"trailer_ctl", "0\r\nX: \x01\r\n\r\n", 400, ParseError::kBadTrailer},
      {"trailer_too_large", "0\r\nX: " + std::string(9000, 'v') + "\r\n\r\n", 431,
       ParseError::kTrailerTooLarge},
      {"final_bare_cr", "0\r\n\rX", 400, ParseError::kBadTrailer},
  };
  for (const Case& c : cases) {
    for (size_t step : {0, 1}) {
      ChunkedDecoder decoder(limits);
      std::string_view rest = c.input;
      ChunkedResult r;
      size_t available = step == 0 ? rest.size() : 1;
      std::string_view input = c.input;
      size_t offset = 0;
      do {
        r = decoder.Decode(input.substr(offset, available - offset));
        offset += r.consumed;
        if (r.status == ChunkedStatus::kNeedMore && available < input.size()) {
          ++available;
        }
      } while (r.status == ChunkedStatus::kData ||
               (r.status == ChunkedStatus::kNeedMore && offset < input.size()));
      EXPECT_EQ(r.status, ChunkedStatus::kError) << c.name << " step " << step;
      EXPECT_EQ(r.http_status, c.status) << c.name;
      EXPECT_EQ(r.error, c.error) << c.name << " " << ParseErrorName(r.error);
      // Errors are sticky.
      EXPECT_EQ(decoder.Decode("0\r\n\r\n").status, ChunkedStatus::kError) << c.name;
    }
  }
}

TEST(ChunkedDecoder, ResetStartsOver) {
  ChunkedDecoder decoder;
  EXPECT_EQ(decoder.Decode("0\r\n\r\n").status, ChunkedStatus::kDone);
  EXPECT_TRUE(decoder.done());
  decoder.Reset();
  EXPECT_EQ(decoder.Decode("1\r\n").status, ChunkedStatus::kNeedMore);
}

// Feeds `input` in pieces of `step` bytes; the decoder's final status.
ChunkedStatus DecodeInto(ChunkedDecoder& decoder, std::string_view input, size_t step) {
  size_t offset = 0;
  for (size_t guard = 0; guard < 100'000; ++guard) {
    size_t end = std::min(input.size(), offset + step);
    ChunkedResult r = decoder.Decode(input.substr(offset, end - offset));
    offset += r.consumed;
    if (r.status == ChunkedStatus::kNeedMore && offset < input.size()) {
      continue;
    }
    if (r.status != ChunkedStatus::kData) {
      return r.status;
    }
  }
  return ChunkedStatus::kError;
}

TEST(ChunkedDecoder, KeepsTrailersWhenAsked) {
  std::string_view body = "3\r\nabc\r\n0\r\nX-Checksum: abc \r\nGrpc-Status:0\r\n\r\nNEXT";
  for (size_t step : {1, 2, 7, 100}) {
    ChunkedDecoder kept(ChunkedLimits{.keep_trailers = true});
    ASSERT_EQ(DecodeInto(kept, body, step), ChunkedStatus::kDone) << step;
    EXPECT_EQ(kept.trailers(), "X-Checksum: abc \r\nGrpc-Status:0\r\n") << step;
    ChunkedDecoder dropped;
    ASSERT_EQ(DecodeInto(dropped, body, step), ChunkedStatus::kDone) << step;
    EXPECT_EQ(dropped.trailers(), "") << step;
  }
  ChunkedDecoder none(ChunkedLimits{.keep_trailers = true});
  ASSERT_EQ(DecodeInto(none, "0\r\n\r\n", 100), ChunkedStatus::kDone);
  EXPECT_EQ(none.trailers(), "");
  // Reset keeps the option and forgets the fields.
  ChunkedDecoder again(ChunkedLimits{.keep_trailers = true});
  ASSERT_EQ(DecodeInto(again, "0\r\nA: 1\r\n\r\n", 100), ChunkedStatus::kDone);
  again.Reset();
  ASSERT_EQ(DecodeInto(again, "0\r\nB: 2\r\n\r\n", 100), ChunkedStatus::kDone);
  EXPECT_EQ(again.trailers(), "B: 2\r\n");
}

TEST(ChunkedDecoder, KeptTrailersAreStillValidatedAndBounded) {
  ChunkedLimits limits{.max_trailer_bytes = 64, .max_trailer_fields = 2, .keep_trailers = true};
  ChunkedDecoder bad_name(limits);
  EXPECT_EQ(DecodeInto(bad_name, "0\r\nX Y: 1\r\n\r\n", 100), ChunkedStatus::kError);
  EXPECT_EQ(bad_name.trailers(), "");
  ChunkedDecoder bare_lf(limits);
  EXPECT_EQ(DecodeInto(bare_lf, "0\r\nX: 1\n\r\n", 100), ChunkedStatus::kError);
  ChunkedDecoder ctl(limits);
  EXPECT_EQ(DecodeInto(ctl, std::string_view("0\r\nX: \x01\r\n\r\n"), 100), ChunkedStatus::kError);
  ChunkedDecoder too_many(limits);
  EXPECT_EQ(DecodeInto(too_many, "0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", 1), ChunkedStatus::kError);
  ChunkedDecoder too_long(limits);
  std::string big = "0\r\nA: " + std::string(80, 'v') + "\r\n\r\n";
  EXPECT_EQ(DecodeInto(too_long, big, 5), ChunkedStatus::kError);
  EXPECT_EQ(too_long.trailers(), "");
}

TEST(ChunkedDecoder, PassableTrailersLeaveOutForbiddenFields) {
  std::string block =
      "X-Checksum: abc \r\nContent-Length: 5\r\nSet-Cookie: a=b\r\nTE: trailers\r\n"
      "connection: close\r\nAuthorization: x\r\nHost: h\r\nTrailer: X\r\n"
      "Transfer-Encoding: chunked\r\nCache-Control: no-store\r\ngrpc-status:0\r\n";
  std::string seen;
  ForEachPassableTrailer(block, [&](std::string_view name, std::string_view value) {
    seen.append(name).append("=").append(value).append(";");
  });
  EXPECT_EQ(seen, "X-Checksum=abc;grpc-status=0;");
  EXPECT_TRUE(IsForbiddenTrailer("KEEP-ALIVE"));
  EXPECT_TRUE(IsForbiddenTrailer(":status"));
  EXPECT_FALSE(IsForbiddenTrailer("x-checksum"));
}

TEST(Trailers, ForwardingFieldsAreNeverPassable) {
  // Issue 23 item 3: after the body, as before it, only the proxy says who
  // the client is.
  for (std::string_view name :
       {"ssl_client_cert", "SSL-Client-Cert-Chain-1", "SSL_CIPHER_SUITE", "ssl_cipher_usekeysize",
        "X-Forwarded-For", "x-forwarded-proto", "X-Forwarded-Host", "X-Forwarded-Port",
        "x-request-id", "Forwarded", "X-Real-IP", "ClientProtocol", "x-sap-webdisp-ap",
        "X_Forwarded_For", "client-protocol"}) {
    EXPECT_TRUE(IsForbiddenTrailer(name)) << name;
  }
  std::string seen;
  ForEachPassableTrailer(
      "ssl_client_cert: forged\r\nX-Checksum: 1\r\nForwarded: for=1.2.3.4\r\n",
      [&](std::string_view name, std::string_view) { seen.append(name).append(";"); });
  EXPECT_EQ(seen, "X-Checksum;");
}

}  // namespace
}  // namespace kwd::http
