// Fuzzes the request path of kwd_http: head parser, framing, chunked decoder
// over the rest, forwarding and log masking; also the response parser. The
// first input byte chooses a split point: the same bytes fed in two pieces
// (through a buffer that grows and may move) must give the same result as
// fed whole. Any mismatch aborts.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dataplane/http/access_log_mask.h"
#include "dataplane/http/chunked.h"
#include "dataplane/http/forward.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"

namespace {

using namespace kwd::http;

void Check(bool condition) {
  if (!condition) {
    std::abort();
  }
}

bool SameHead(const RequestHead& a, const RequestHead& b) {
  if (a.method != b.method || a.target != b.target || a.version_minor != b.version_minor ||
      a.target_form != b.target_form || a.authority != b.authority ||
      a.path_and_query != b.path_and_query || a.header_count != b.header_count) {
    return false;
  }
  for (size_t i = 0; i < a.header_count; ++i) {
    if (a.headers[i].name != b.headers[i].name || a.headers[i].value != b.headers[i].value) {
      return false;
    }
  }
  return true;
}

bool Inside(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

struct BodyOutcome {
  ChunkedStatus status = ChunkedStatus::kNeedMore;
  ParseError error = ParseError::kNone;
  size_t consumed = 0;
  std::string body;
  std::string trailers;
};

// The split decoder keeps trailers: they must not change what is accepted.
BodyOutcome DecodeChunked(std::string_view input, size_t split, bool keep_trailers) {
  ChunkedDecoder decoder(ChunkedLimits{.keep_trailers = keep_trailers});
  BodyOutcome out;
  size_t offset = 0;
  size_t available = split;
  while (true) {
    ChunkedResult r = decoder.Decode(input.substr(offset, available - offset));
    Check(r.consumed <= available - offset);
    Check(Inside(r.data, input));
    offset += r.consumed;
    if (r.status == ChunkedStatus::kData) {
      Check(!r.data.empty());
      out.body.append(r.data);
      continue;
    }
    if (r.status == ChunkedStatus::kNeedMore && available < input.size()) {
      available = input.size();
      continue;
    }
    out.status = r.status;
    out.error = r.error;
    out.consumed = offset;
    out.trailers.assign(decoder.trailers());
    Check(out.trailers.size() <= ChunkedLimits{}.max_trailer_bytes);
    return out;
  }
}

RequestHead g_whole_head;
RequestHead g_split_head;
ResponseHead g_response_head;
std::string g_out;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t split = input.empty() ? 0 : data[0] % (input.size() + 1);

  // The response parser and framing over the same bytes.
  ResponseParser response_parser;
  ParseResult response = response_parser.Parse(input, &g_response_head);
  if (response.complete()) {
    ResponseInfo response_info;
    if (AnalyzeResponse(g_response_head, "GET", &response_info).ok()) {
      ForwardResponseOptions options;
      SerializeResponseHead(g_response_head, options, g_out);
      // Runs of canonical lines copied whole give the bytes written field
      // by field.
      static ResponseHead plain;
      plain = g_response_head;
      for (Header& h : plain.headers) {
        h.canonical = false;
      }
      static std::string plain_out;
      SerializeResponseHead(plain, options, plain_out);
      Check(plain_out == g_out);
    }
  }

  RequestParser whole_parser;
  ParseResult whole = whole_parser.Parse(input, &g_whole_head);
  Check(whole.consumed <= input.size());
  Check(whole.failed() == (whole.http_status != 0));

  // The same bytes in two reads through a growing buffer.
  std::string buffer(input.substr(0, split));
  RequestParser split_parser;
  ParseResult first = split_parser.Parse(buffer, &g_split_head);
  ParseResult second = first;
  if (first.partial()) {
    buffer.append(input.substr(split));
    buffer.shrink_to_fit();
    second = split_parser.Parse(buffer, &g_split_head);
  }
  Check(second.status == whole.status);
  Check(second.error == whole.error);
  Check(second.http_status == whole.http_status);
  Check(second.consumed == whole.consumed);
  if (!whole.complete()) {
    return 0;
  }
  Check(SameHead(g_whole_head, g_split_head));
  Check(Inside(g_whole_head.method, input) && Inside(g_whole_head.target, input));
  for (const Header& h : g_whole_head.fields()) {
    Check(Inside(h.name, input) && Inside(h.value, input) && !h.name.empty());
    // Field values hold no control byte but HTAB and no DEL, however long
    // (a long line's rest is checked 64 bytes a step).
    for (char c : h.value) {
      Check(c == '\t' || (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f));
    }
  }

  RequestInfo info;
  FramingResult framing = AnalyzeRequest(g_whole_head, {}, &info);
  if (framing.ok()) {
    ForwardRequestOptions options;
    options.client_ip = "192.0.2.1";
    // Received X-Forwarded-For values joined with the client's address: the
    // head writer's bound must hold them (it aborts when short).
    options.keep_forwarded_for = (split & 1) != 0;
    // SAP's fields for an ABAP group (the bound must hold them too).
    options.client_protocol = (split & 2) != 0 ? "https" : "";
    options.access_points = (split & 4) != 0 ? "HTTP=65535,HTTPS=65535" : "";
    SerializeRequestHead(g_whole_head, info, options, g_out);
    static RequestHead plain;
    plain = g_whole_head;
    for (Header& h : plain.headers) {
      h.canonical = false;
    }
    static std::string plain_out;
    SerializeRequestHead(plain, info, options, plain_out);
    Check(plain_out == g_out);
    // What we send upstream must itself parse, and frame the same way.
    RequestParser reparser;
    static RequestHead forwarded;
    ParseResult re = reparser.Parse(g_out, &forwarded);
    // Adding X-Forwarded-* may push a head that was at a limit over it.
    if (re.complete()) {
      Check(re.consumed == g_out.size());
      RequestInfo forwarded_info;
      Check(AnalyzeRequest(forwarded, {}, &forwarded_info).ok());
      Check(forwarded_info.body == info.body);
      Check(forwarded_info.content_length == info.content_length);
      // Content-Length goes on as one field with one plain value.
      int lengths = 0;
      for (const Header& h : forwarded.fields()) {
        if (EqualsIgnoreCase(h.name, "content-length")) {
          ++lengths;
          Check(h.value.find(',') == std::string_view::npos);
        }
      }
      Check(lengths <= 1);
      // Only the proxy's own spelling of a forwarding field goes on, and
      // from an untrusted client none but the proxy's.
      int client_protocols = 0;
      int access_points = 0;
      for (const Header& h : forwarded.fields()) {
        const FieldId id = ClassifyFieldName(h.name);
        Check(id != FieldId::kForwardingAlias && id != FieldId::kProxyAssertedTls);
        if (!options.keep_forwarded_for) {
          Check(id != FieldId::kForwarded && id != FieldId::kXRealIp &&
                id != FieldId::kXForwardedPort);
        }
        client_protocols += id == FieldId::kClientProtocol ? 1 : 0;
        access_points += id == FieldId::kSapWebdispAp ? 1 : 0;
      }
      Check(options.keep_forwarded_for ||
            (client_protocols == (options.client_protocol.empty() ? 0 : 1) &&
             access_points == (options.access_points.empty() ? 0 : 1)));
    } else {
      Check(re.error == ParseError::kTooManyHeaders || re.error == ParseError::kHeadTooLarge);
    }
  }
  g_out.clear();
  AppendMaskedTarget(g_whole_head.target, g_out);
  for (const Header& h : g_whole_head.fields()) {
    AppendMaskedFieldValue(h.name, h.value, g_out);
  }

  std::string_view rest = input.substr(whole.consumed);
  if (framing.ok() && info.body == BodyKind::kChunked) {
    BodyOutcome body_whole = DecodeChunked(rest, rest.size(), false);
    BodyOutcome body_split = DecodeChunked(rest, split < rest.size() ? split : rest.size(), true);
    Check(body_whole.trailers.empty());
    ForEachPassableTrailer(body_split.trailers, [](std::string_view name, std::string_view value) {
      Check(!name.empty() && !IsForbiddenTrailer(name));
      Check(value.empty() || (value.front() != ' ' && value.back() != ' '));
    });
    Check(body_whole.status == body_split.status);
    Check(body_whole.error == body_split.error);
    Check(body_whole.body == body_split.body);
    if (body_whole.status == ChunkedStatus::kDone) {
      Check(body_whole.consumed == body_split.consumed);
    }
  }

  return 0;
}
