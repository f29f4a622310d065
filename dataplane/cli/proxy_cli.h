#pragma once

// The kwd-proxy command line (INTERFACE.md "kwd-proxy"). dataplane/main.cc
// only calls ProxyMain.

#include <iosfwd>

namespace kwd::cli {

// Dispatches to a subcommand. Exit codes: 0 success, 1 runtime failure
// (e.g. an unreadable or invalid snapshot), 2 usage error.
int ProxyMain(int argc, char** argv);

// `kwd-proxy explain ...`: argv[0] is "explain". Writes decisions to `out`,
// messages to `err`.
int ExplainMain(int argc, char** argv, std::ostream& out, std::ostream& err);

// `kwd-proxy serve ...`: not implemented yet; the event loop will build a
// routing::RoutingTable per snapshot and one routing::Router per worker.
int ServeMain(int argc, char** argv, std::ostream& out, std::ostream& err);

// The affinity-cookie key used when neither --affinity-key-file nor
// $KWD_AFFINITY_KEY is given: for development only, since anyone can read it.
inline constexpr const char kDevelopmentAffinityKey[] = "kwd-development-affinity-key";

}  // namespace kwd::cli
