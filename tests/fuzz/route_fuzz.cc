// Arbitrary bytes through Router::Route on a fixed table. Input: the first
// line is the request target, the second the Host header, every further line a
// Cookie header value; a first byte of 'S' makes the request https. Must never
// crash; every decision must be self-consistent. Host shop.example.com has
// SAP modification rules that copy the path and query into the URL and into
// headers: what they forward stays a valid target and valid field values.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/routing/path.h"
#include "dataplane/routing/router.h"
#include "dataplane/routing/routing_table.h"
#include "tests/dataplane/routing/test_snapshot.h"

namespace {

struct Engine {
  kwd::session::SessionRegistry sessions;
  kwd::routing::ServerHealthRegistry health;
  std::shared_ptr<kwd::routing::ManualClock> clock = std::make_shared<kwd::routing::ManualClock>(0);
  std::unique_ptr<kwd::routing::Router> router;

  Engine() {
    std::string error;
    kwd::v1::Snapshot snapshot = kwd::routing::testing::StandardSnapshot();
    kwd::v1::Modification* rules = snapshot.mutable_virtual_hosts(2)->add_modifications();
    rules->set_prefix("/");
    rules->set_rules(
        "SetHeader x-path %{PATH}\n"
        "AppendHeader x-query %{QUERY_STRING}\n"
        "AppendHeader x-query %{FORMFIELD:a}\n"
        "RegIRewriteUrl ^/r/(.*)$ /shop/$1/../x?$1 [qsappend]\n"
        "RegIRewriteRawUrl ^/raw/(.*)$ /sap/$1 [noescape]\n"
        "RegIRedirectUrl ^/go/(.*)$ https://%{HTTP_HOST}/$1 [noescape]\n"
        "if %{PATH} regmatch ^/sid/(...)\n"
        "SetHeader x-sap-webdisp-target-sid %{FORMFIELD:sid}\n"
        "RegIRewriteUrl ^/loop/(.*)$ /loop/$1 [restart]\n");
    rules->set_source("erp/fuzz");
    kwd::StampSnapshotVersion(&snapshot);
    auto table = kwd::routing::RoutingTable::Build(snapshot, {&sessions, &health}, &error);
    if (table == nullptr) {
      std::abort();
    }
    router = std::make_unique<kwd::routing::Router>(
        std::make_shared<kwd::session::AffinityCookieCodec>("fuzz-key"), clock);
    router->Apply(table);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Engine engine;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  bool https = false;
  if (!input.empty() && input.front() == 'S') {
    https = true;
    input.remove_prefix(1);
  }
  std::vector<std::string_view> lines;
  while (!input.empty() && lines.size() < 16) {
    size_t newline = input.find('\n');
    lines.push_back(input.substr(0, newline));
    input = newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  }
  std::string_view target = lines.size() > 0 ? lines[0] : std::string_view();
  std::string_view host = lines.size() > 1 ? lines[1] : std::string_view();
  std::span<const std::string_view> cookies;
  if (lines.size() > 2) {
    cookies = std::span<const std::string_view>(lines.data() + 2, lines.size() - 2);
  }
  // A target with a control byte (a tab, say) never reaches the router: the
  // HTTP/1.1 parser and the HTTP/2 :path check (http::ParseRequestTarget)
  // refuse it with 400 first.
  for (char c : target) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return 0;
    }
  }
  kwd::routing::Request request{"GET", target, host, https, cookies};
  kwd::routing::Decision decision = engine.router->Route(request);
  // What the proxy forwards is what it decided on: normalising it again
  // gives the same path and leaves nothing to resolve (no dot segment for a
  // backend's normaliser to read differently).
  std::string upstream;
  if (decision.server != nullptr && kwd::routing::UpstreamTarget(decision, target, &upstream)) {
    static std::vector<char> scratch(1 << 15);
    kwd::routing::NormalizedTarget again;
    if (!kwd::routing::NormalizeTarget(upstream, scratch, &again) || again.path != decision.path ||
        again.forward_path.data() != again.raw_path.data()) {
      std::abort();
    }
  }
  // Rules never make a field name or value with a control character, nor a
  // redirect target with one.
  if (decision.modified) {
    const kwd::modification::State& state = engine.router->modification_state();
    auto clean = [](std::string_view value) {
      for (char c : value) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          return false;
        }
      }
      return true;
    };
    for (const auto& [name, value] : state.headers) {
      if (!clean(name) || !clean(value)) {
        std::abort();
      }
    }
    if (!clean(state.location)) {
      std::abort();
    }
  }
  // A forwarded decision names a server of its group; others carry a status.
  if ((decision.server != nullptr) == (decision.status != 0)) {
    std::abort();
  }
  if (decision.server != nullptr &&
      (decision.group == nullptr || decision.server_index < 0 ||
       &decision.group->servers[decision.server_index] != decision.server)) {
    std::abort();
  }
  if (decision.set_affinity_cookie) {
    std::string header = engine.router->AffinityCookieHeader(decision, https);
    if (header.empty()) {
      std::abort();
    }
  }
  engine.router->LearnJSessionId(decision, host);
  engine.router->Complete(decision);
  engine.clock->Advance(1);
  return 0;
}
