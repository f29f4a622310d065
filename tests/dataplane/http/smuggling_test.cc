// Request smuggling and malformed-message vectors, end to end through the
// head parser, the framing rules and the chunked decoder: each must give the
// listed status, whether the bytes arrive at once or one by one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dataplane/http/chunked.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"

namespace kwd::http {
namespace {

struct Outcome {
  int status = 0;  // 0: accepted (a complete message with its body)
  std::string body;
  bool operator==(const Outcome&) const = default;
};

// Runs a whole request through parser, framing and body decoding; `step` is
// how many new bytes arrive per read (0: everything at once).
Outcome Process(std::string_view bytes, size_t step) {
  static RequestHead head;
  RequestParser parser;
  std::string buffer;
  size_t fed = 0;
  auto feed = [&]() {
    size_t n = step == 0 ? bytes.size() - fed : std::min(step, bytes.size() - fed);
    buffer.append(bytes.substr(fed, n));
    fed += n;
  };
  ParseResult parsed;
  do {
    feed();
    parsed = parser.Parse(buffer, &head);
  } while (parsed.partial() && fed < bytes.size());
  if (!parsed.complete()) {
    return {parsed.failed() ? parsed.http_status : -1, {}};
  }
  RequestInfo info;
  FramingResult framing = AnalyzeRequest(head, FramingLimits{}, &info);
  if (!framing.ok()) {
    return {framing.http_status, {}};
  }
  Outcome outcome;
  std::string rest = buffer.substr(parsed.consumed);
  if (info.body == BodyKind::kContentLength) {
    while (rest.size() < info.content_length && fed < bytes.size()) {
      size_t before = buffer.size();
      feed();
      rest += buffer.substr(before);
    }
    if (rest.size() < info.content_length) {
      return {-1, {}};
    }
    outcome.body = rest.substr(0, info.content_length);
    return outcome;
  }
  if (info.body != BodyKind::kChunked) {
    return outcome;
  }
  ChunkedDecoder decoder;
  while (true) {
    ChunkedResult r = decoder.Decode(rest);
    if (r.status == ChunkedStatus::kData) {
      outcome.body.append(r.data);
    }
    rest.erase(0, r.consumed);
    if (r.status == ChunkedStatus::kData) {
      continue;
    }
    if (r.status == ChunkedStatus::kDone) {
      return outcome;
    } else if (r.status == ChunkedStatus::kError) {
      return {r.http_status, {}};
    } else if (fed < bytes.size()) {
      size_t before = buffer.size();
      feed();
      rest += buffer.substr(before);
    } else {
      return {-1, {}};  // incomplete
    }
  }
}

struct Vector {
  std::string name;
  std::string bytes;
  int status;
};

std::string Post(std::string_view fields, std::string_view body = "") {
  return "POST /sap/bc/x HTTP/1.1\r\nHost: erp\r\n" + std::string(fields) + "\r\n" +
         std::string(body);
}

std::vector<Vector> Vectors() {
  std::string big_header = "X-Big: " + std::string(65 * 1024, 'a') + "\r\n";
  std::string many_trailers;
  for (int i = 0; i < 40; ++i) {
    many_trailers += "T" + std::to_string(i) + ": v\r\n";
  }
  return {
      {"cl_then_te", Post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), 400},
      {"te_then_cl", Post("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"), 400},
      {"duplicate_differing_cl", Post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"), 400},
      {"cl_list_differing", Post("Content-Length: 5, 6\r\n", "hello!"), 400},
      {"cl_plus_sign", Post("Content-Length: +5\r\n", "hello"), 400},
      {"cl_minus_sign", Post("Content-Length: -5\r\n", "hello"), 400},
      {"cl_space_inside", Post("Content-Length: 1 2\r\n", "hello"), 400},
      {"cl_hex", Post("Content-Length: 0x5\r\n", "hello"), 400},
      {"cl_overflow", Post("Content-Length: 99999999999999999999999\r\n", "hello"), 400},
      {"cl_empty", Post("Content-Length:\r\n", "hello"), 400},
      {"cl_trailing_comma", Post("Content-Length: 5,\r\n", "hello"), 400},
      // An empty list element is no length (and another parser may stop at it).
      {"cl_empty_element", Post("Content-Length: 5,,5\r\n", "hello"), 400},
      {"cl_only_comma", Post("Content-Length: ,\r\n", "hello"), 400},
      {"cl_over_limit", Post("Content-Length: 104857601\r\n"), 413},
      {"te_chunked_identity", Post("Transfer-Encoding: chunked, identity\r\n", "0\r\n\r\n"), 400},
      {"te_xchunked", Post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"), 400},
      {"te_identity", Post("Transfer-Encoding: identity\r\n", "hello"), 400},
      {"te_split_fields", Post("Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n"),
       400},
      {"te_chunked_twice", Post("Transfer-Encoding: chunked, chunked\r\n", "0\r\n\r\n"), 400},
      {"te_chunked_params", Post("Transfer-Encoding: chunked;x=1\r\n", "0\r\n\r\n"), 400},
      {"te_quoted", Post("Transfer-Encoding: \"chunked\"\r\n", "0\r\n\r\n"), 400},
      {"te_gzip_chunked_unsupported", Post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
       501},
      {"te_on_http10", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"te_space_before_colon", Post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n"), 400},
      {"te_vertical_tab",
       Post("Transfer-Encoding:\x0b"
            "chunked\r\n",
            "0\r\n\r\n"),
       400},
      {"te_obs_fold", Post("Transfer-Encoding: identity\r\n chunked\r\n", "0\r\n\r\n"), 400},
      {"bare_cr_in_field", Post("X: a\rTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), 400},
      {"nul_in_field", Post(std::string("X: a\0b\r\n", 8)), 400},
      {"bare_lf_field", Post("Transfer-Encoding: chunked\n", "0\r\n\r\n"), 400},
      {"absolute_form_userinfo_host", "GET http://user@erp/ HTTP/1.1\r\nHost: erp\r\n\r\n", 400},
      {"absolute_form_unclosed_ipv6", "GET http://[::1/ HTTP/1.1\r\nHost: erp\r\n\r\n", 400},
      {"absolute_form_empty_host", "GET http://:80/ HTTP/1.1\r\nHost: erp\r\n\r\n", 400},
      {"missing_host", "GET / HTTP/1.1\r\n\r\n", 400},
      {"double_host", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"header_over_64k", "GET / HTTP/1.1\r\nHost: erp\r\n" + big_header + "\r\n", 431},
      {"chunk_size_0x", Post("Transfer-Encoding: chunked\r\n", "0x5\r\nhello\r\n0\r\n\r\n"), 400},
      {"chunk_size_negative", Post("Transfer-Encoding: chunked\r\n", "-1\r\nh\r\n0\r\n\r\n"), 400},
      {"chunk_size_plus", Post("Transfer-Encoding: chunked\r\n", "+5\r\nhello\r\n0\r\n\r\n"), 400},
      {"chunk_size_empty", Post("Transfer-Encoding: chunked\r\n", "\r\nhello\r\n0\r\n\r\n"), 400},
      {"chunk_size_overflow",
       Post("Transfer-Encoding: chunked\r\n", "10000000000000005\r\nhello\r\n0\r\n\r\n"), 400},
      {"chunk_size_over_limit",
       Post("Transfer-Encoding: chunked\r\n", "ffffffff\r\nhello\r\n0\r\n\r\n"), 413},
      {"chunk_size_trailing_space",
       Post("Transfer-Encoding: chunked\r\n", "5 \r\nhello\r\n0\r\n\r\n"), 400},
      {"chunk_missing_crlf", Post("Transfer-Encoding: chunked\r\n", "5\r\nhelloX\r\n0\r\n\r\n"),
       400},
      {"chunk_data_too_long", Post("Transfer-Encoding: chunked\r\n", "3\r\nhello\r\n0\r\n\r\n"),
       400},
      {"chunk_line_too_long",
       Post("Transfer-Encoding: chunked\r\n",
            "5;ext=" + std::string(5000, 'a') + "\r\nhello\r\n0\r\n\r\n"),
       400},
      {"chunk_ext_bare_lf", Post("Transfer-Encoding: chunked\r\n", "5;a\nb\r\nhello\r\n0\r\n\r\n"),
       400},
      {"chunk_size_bare_lf", Post("Transfer-Encoding: chunked\r\n", "5\nhello\r\n0\r\n\r\n"), 400},
      {"trailer_space_before_colon", Post("Transfer-Encoding: chunked\r\n", "0\r\nX : y\r\n\r\n"),
       400},
      {"trailer_obs_fold", Post("Transfer-Encoding: chunked\r\n", "0\r\nX: y\r\n z\r\n\r\n"), 400},
      {"trailers_too_many",
       Post("Transfer-Encoding: chunked\r\n", "0\r\n" + many_trailers + "\r\n"), 431},
      // Accepted references: the same shapes done right.
      {"valid_chunked_with_ext_and_trailer",
       Post("Transfer-Encoding: chunked\r\n", "5;name=\"v\"\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"), 0},
      {"valid_identical_cl", Post("Content-Length: 5\r\nContent-Length: 5\r\n", "hello"), 0},
  };
}

TEST(Smuggling, EachVectorGetsItsStatusWholeAndIncrementally) {
  std::vector<Vector> vectors = Vectors();
  ASSERT_GE(vectors.size(), 30u);
  for (const Vector& v : vectors) {
    Outcome whole = Process(v.bytes, 0);
    EXPECT_EQ(whole.status, v.status) << v.name;
    for (size_t step : {1, 2, 7}) {
      Outcome split = Process(v.bytes, step);
      EXPECT_EQ(split, whole) << v.name << " step " << step;
    }
  }
}

TEST(Smuggling, AcceptedChunkedBodyIsDecoded) {
  Outcome o = Process(
      Post("Transfer-Encoding: chunked\r\n", "5;name=\"v\"\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"), 1);
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.body, "hello");
}

}  // namespace
}  // namespace kwd::http
