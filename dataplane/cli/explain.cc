#include <charconv>
#include <cstdlib>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/snapshot_io.h"
#include "dataplane/cli/proxy_cli.h"
#include "dataplane/routing/clock.h"
#include "dataplane/routing/decision_json.h"
#include "dataplane/routing/router.h"
#include "dataplane/routing/routing_table.h"

namespace kwd::cli {
namespace {

constexpr const char kExplainUsage[] =
    "usage: kwd-proxy explain --snapshot FILE --url URL [--host HOST]\n"
    "                         [--header 'Name: value']... [--count N]\n"
    "                         [--affinity-key-file FILE] [--method M]\n"
    "                         [--https-port PORT]\n"
    "\n"
    "Routes N simulated sequential requests (each answered before the next) with\n"
    "the snapshot FILE (what 'kwd-controller compile' prints) and prints one JSON\n"
    "object per request: group, server, address, rule, kind, reason, status, lost,\n"
    "set_cookie, path, host, location (a redirect's), hsts; when SAP modification\n"
    "rules changed or answered the request also modifications (every rule that\n"
    "fired: source, line, command, and the URL and headers after it), url (the\n"
    "target forwarded) and system (the SID a rule chose). Session tables persist across the N\n"
    "requests; the requests carry only what the flags give (add cookies with\n"
    "--header 'Cookie: ...').\n"
    "\n"
    "  --snapshot FILE           snapshot JSON\n"
    "  --url URL                 http(s)://host/path?query (scheme sets https, host is\n"
    "                            the Host unless --host) or /path?query\n"
    "  --host HOST               Host header\n"
    "  --header 'Name: value'    a request header (repeatable): Cookie and Host route,\n"
    "                            modification rules see every one\n"
    "  --count N                 number of requests (default 1)\n"
    "  --affinity-key-file FILE  affinity-cookie signing key; else $KWD_AFFINITY_KEY,\n"
    "                            else the development key \"kwd-development-affinity-key\"\n"
    "  --method M                request method (default GET; a secure redirect is 301\n"
    "                            for GET and HEAD, 308 for other methods)\n"
    "  --https-port PORT         the proxy's public https port a secure redirect names\n"
    "                            (default 443; 0: the proxy has none, so such URLs get 403)\n";

struct ExplainFlags {
  std::string snapshot;
  std::string url;
  std::string host;
  bool host_given = false;
  std::vector<std::string> headers;
  int count = 1;
  std::string affinity_key_file;
  std::string method = "GET";
  uint16_t https_port = 443;
};


// Returns 0 to go on, or the exit code (usage shown / error).
int ParseFlags(int argc, char** argv, ExplainFlags* flags, std::ostream& out, std::ostream& err) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      out << kExplainUsage;
      return -1;
    }
    std::string_view name = arg;
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
      has_value = true;
    }
    auto take_value = [&]() -> bool {
      if (has_value) {
        return true;
      }
      if (i + 1 >= argc) {
        err << "kwd-proxy explain: " << name << " needs a value\n";
        return false;
      }
      value = argv[++i];
      return true;
    };
    if (name == "--snapshot") {
      if (!take_value()) {
        return 2;
      }
      flags->snapshot = value;
    } else if (name == "--url") {
      if (!take_value()) {
        return 2;
      }
      flags->url = value;
    } else if (name == "--host") {
      if (!take_value()) {
        return 2;
      }
      flags->host = value;
      flags->host_given = true;
    } else if (name == "--header") {
      if (!take_value()) {
        return 2;
      }
      if (value.find(':') == std::string::npos || value.front() == ':') {
        err << "kwd-proxy explain: --header wants 'Name: value', got \"" << value << "\"\n";
        return 2;
      }
      flags->headers.push_back(value);
    } else if (name == "--count") {
      if (!take_value()) {
        return 2;
      }
      int count = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), count);
      if (ec != std::errc() || end != value.data() + value.size() || count < 1 || count > 1000000) {
        err << "kwd-proxy explain: --count wants a number from 1 to 1000000, got \"" << value
            << "\"\n";
        return 2;
      }
      flags->count = count;
    } else if (name == "--affinity-key-file") {
      if (!take_value()) {
        return 2;
      }
      flags->affinity_key_file = value;
    } else if (name == "--method") {
      if (!take_value()) {
        return 2;
      }
      if (value.empty() || value.size() > 32 ||
          value.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ-") != std::string::npos) {
        err << "kwd-proxy explain: --method wants an upper-case method such as GET or POST, got \""
            << value << "\"\n";
        return 2;
      }
      flags->method = value;
    } else if (name == "--https-port") {
      if (!take_value()) {
        return 2;
      }
      unsigned port = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), port);
      if (ec != std::errc() || end != value.data() + value.size() || port > 65535) {
        err << "kwd-proxy explain: --https-port wants a port from 0 to 65535, got \"" << value
            << "\"\n";
        return 2;
      }
      flags->https_port = static_cast<uint16_t>(port);
    } else {
      err << "kwd-proxy explain: unknown flag \"" << arg << "\"\n\n" << kExplainUsage;
      return 2;
    }
  }
  if (flags->snapshot.empty() || flags->url.empty()) {
    err << "kwd-proxy explain: --snapshot and --url are required\n\n" << kExplainUsage;
    return 2;
  }
  return 0;
}

bool LoadExplainAffinityKey(const ExplainFlags& flags, std::string* key, std::ostream& err) {
  std::string error;
  bool development = false;
  if (!LoadAffinityKey(flags.affinity_key_file, key, &development, &error)) {
    err << "kwd-proxy explain: " << error << "\n";
    return false;
  }
  return true;
}

}  // namespace

int ExplainMain(int argc, char** argv, std::ostream& out, std::ostream& err) {
  ExplainFlags flags;
  if (int code = ParseFlags(argc, argv, &flags, out, err); code != 0) {
    return code < 0 ? 0 : code;
  }

  // The request the flags describe.
  routing::ExplainRequest request = routing::MakeExplainRequest(
      flags.url, flags.headers,
      flags.host_given ? std::optional<std::string_view>(flags.host) : std::nullopt);
  request.method = flags.method;

  std::string affinity_key;
  if (!LoadExplainAffinityKey(flags, &affinity_key, err)) {
    return 1;
  }
  v1::Snapshot snapshot;
  std::string error;
  // A diagnostic on a snapshot at hand: one written by hand, without a
  // version, is explained too (serve refuses it).
  if (!LoadSnapshotFile(flags.snapshot, &snapshot, &error, SnapshotVersionCheck::kIfSet)) {
    err << "kwd-proxy explain: cannot load snapshot " << flags.snapshot << ": " << error << "\n";
    return 1;
  }
  session::SessionRegistry sessions;
  routing::ServerHealthRegistry health;
  auto table = routing::RoutingTable::Build(snapshot, {&sessions, &health}, &error);
  if (table == nullptr) {
    err << "kwd-proxy explain: snapshot " << flags.snapshot << " rejected: " << error << "\n";
    return 1;
  }
  auto clock = std::make_shared<routing::ManualClock>(0);
  routing::Router router(std::make_shared<session::AffinityCookieCodec>(affinity_key), clock);
  router.Apply(table);
  router.set_trace_modifications(true);
  router.set_https_port(flags.https_port);

  for (int i = 0; i < flags.count; ++i) {
    routing::Decision decision = router.Route(request.View());
    // The URL's bytes need not be UTF-8: replaced, not an exception.
    out << routing::DecisionJson(router, decision, request.https)
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
        << "\n";
    router.Complete(decision);
    clock->Advance(1);  // simulated requests are one millisecond apart
  }
  out.flush();
  return 0;
}

}  // namespace kwd::cli
