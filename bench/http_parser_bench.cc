// Request head parsing, framing, chunked decoding and forwarding cost.
#include <benchmark/benchmark.h>

#include <string>

#include "dataplane/http/chunked.h"
#include "dataplane/http/forward.h"
#include "dataplane/http/framing.h"
#include "dataplane/http/parser.h"

namespace {

using namespace kwd::http;

const std::string kRequest =
    "GET /sap/bc/ui5_ui5/ui2/ushell/shells/abap/FioriLaunchpad.html?sap-client=001&sap-language=EN"
    " HTTP/1.1\r\n"
    "Host: erp.example.com:44300\r\n"
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)\r\n"
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
    "Accept-Language: en-US,en;q=0.5\r\n"
    "Accept-Encoding: gzip, deflate, br\r\n"
    "Cookie: sap-usercontext=sap-client=001; MYSAPSSO2=AjQxMDMBABhFAFIAUAAgACAAIAAgACAAIAAgACAA; "
    "SAP_SESSIONID_ERP_001=abcdefghijklmnopqrstuvwxyz0123456789%3d\r\n"
    "Connection: keep-alive\r\n"
    "Upgrade-Insecure-Requests: 1\r\n\r\n";

void BM_ParseRequestHead(benchmark::State& state) {
  RequestHead head;
  for (auto _ : state) {
    RequestParser parser;
    ParseResult r = parser.Parse(kRequest, &head);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kRequest.size()));
}
BENCHMARK(BM_ParseRequestHead);

// The same head arriving in pieces of state.range(0) bytes.
void BM_ParseRequestHeadIncremental(benchmark::State& state) {
  RequestHead head;
  size_t step = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    RequestParser parser;
    ParseResult r;
    for (size_t n = step; n < kRequest.size() + step; n += step) {
      r = parser.Parse(std::string_view(kRequest).substr(0, n), &head);
    }
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_ParseRequestHeadIncremental)->Arg(1)->Arg(64);

void BM_ParseAnalyzeForward(benchmark::State& state) {
  RequestHead head;
  RequestInfo info;
  std::string out;
  ForwardRequestOptions options;
  options.client_ip = "192.0.2.10";
  for (auto _ : state) {
    RequestParser parser;
    parser.Parse(kRequest, &head);
    AnalyzeRequest(head, {}, &info);
    SerializeRequestHead(head, info, options, out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_ParseAnalyzeForward);

void BM_DecodeChunked(benchmark::State& state) {
  std::string body;
  for (int i = 0; i < 64; ++i) {
    body += "400\r\n" + std::string(1024, 'x') + "\r\n";
  }
  body += "0\r\n\r\n";
  for (auto _ : state) {
    ChunkedDecoder decoder;
    std::string_view rest = body;
    size_t total = 0;
    while (true) {
      ChunkedResult r = decoder.Decode(rest);
      rest.remove_prefix(r.consumed);
      total += r.data.size();
      if (r.status != ChunkedStatus::kData) {
        break;
      }
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_DecodeChunked);

}  // namespace

BENCHMARK_MAIN();
