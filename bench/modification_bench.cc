// Cost of the modification rules per request (common/modification): a
// request under a prefix with 100 rules of the usual kinds (anchored URL
// rewrites and redirects, forbidden patterns, host conditions with header
// edits), none of which matches, and one that rewrites, sets headers and
// passes on. The target is under 2 us per request for 100 rules.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/hundred_rules.h"
#include "common/modification/program.h"

namespace {

using namespace kwd::modification;

struct Fixture {
  std::unique_ptr<const Program> program;
  std::vector<HeaderView> headers = {{"Host", "erp.example.com"},
                                     {"User-Agent", "Mozilla/5.0"},
                                     {"Cookie", "sap-usercontext=sap-client=100"}};
  RequestView request;
  State state;

  explicit Fixture(const std::string& text, std::string_view path) {
    ParseError error;
    program = Program::CompileText(text, &error);
    if (program == nullptr) {
      std::abort();
    }
    request.method = "GET";
    request.path = path;
    request.raw_path = path;
    request.query = "sap-client=100";
    request.has_query = true;
    request.headers = headers;
    request.server_port = "443";
    request.https = true;
  }
};

void BM_HundredRulesNoneMatches(benchmark::State& bench) {
  Fixture f(kwd::bench::HundredRules(), "/sap/bc/gui/sap/its/webgui");
  for (auto _ : bench) {
    f.program->Evaluate(f.request, &f.state);
    benchmark::DoNotOptimize(f.state.fired);
  }
  if (f.state.fired != 0) {
    bench.SkipWithError("a rule fired");
  }
}
BENCHMARK(BM_HundredRulesNoneMatches);

void BM_HundredRulesRewriteAtTheEnd(benchmark::State& bench) {
  Fixture f(kwd::bench::HundredRules() +
                "RegIRewriteUrl ^/sap/bc/gui/(.*) /sap/bc/gui2/$1\n"
                "SetHeader clientProtocol %{SERVER_PROTOCOL}\n",
            "/sap/bc/gui/sap/its/webgui");
  for (auto _ : bench) {
    f.program->Evaluate(f.request, &f.state);
    benchmark::DoNotOptimize(f.state.fired);
  }
  if (f.state.fired != 2 || f.state.path != "/sap/bc/gui2/sap/its/webgui") {
    bench.SkipWithError("the rewrite did not fire");
  }
}
BENCHMARK(BM_HundredRulesRewriteAtTheEnd);

void BM_OneRuleNoneMatches(benchmark::State& bench) {
  Fixture f("RegIRedirectUrl ^/$ /sap/bc/ui2/flp [CODE=permanent]\n", "/sap/bc/gui/x");
  for (auto _ : bench) {
    f.program->Evaluate(f.request, &f.state);
    benchmark::DoNotOptimize(f.state.fired);
  }
}
BENCHMARK(BM_OneRuleNoneMatches);

}  // namespace

BENCHMARK_MAIN();
