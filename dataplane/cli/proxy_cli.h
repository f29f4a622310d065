#pragma once

// The kwd-proxy command line (docs/operations.md, "The proxy"). dataplane/main.cc
// only calls ProxyMain.

#include <iosfwd>
#include <string>

namespace kwd::cli {

// Dispatches to a subcommand. Exit codes: 0 success, 1 runtime failure
// (e.g. an unreadable or invalid snapshot), 2 usage error.
int ProxyMain(int argc, char** argv);

// `kwd-proxy explain ...`: argv[0] is "explain". Writes decisions to `out`,
// messages to `err`.
int ExplainMain(int argc, char** argv, std::ostream& out, std::ostream& err);

// `kwd-proxy serve ...` (argv[0] is "serve"): workers, health checks and the
// admin port until SIGTERM/SIGINT; SIGHUP reloads --snapshot FILE. Exit codes:
// 0 after a clean shutdown, 1 when it cannot start, 2 for usage errors.
int ServeMain(int argc, char** argv, std::ostream& out, std::ostream& err);

// The affinity-cookie key used when neither --affinity-key-file nor
// $KWD_AFFINITY_KEY is given: for development only, since anyone can read it.
inline constexpr const char kDevelopmentAffinityKey[] = "kwd-development-affinity-key";

// The affinity-cookie key, shared by `serve` and `explain` so both sign alike:
// the contents of `key_file` without surrounding whitespace when given, else
// $KWD_AFFINITY_KEY, else kDevelopmentAffinityKey (`*development` set).
// Returns false with `error` set when the file is unreadable or empty.
bool LoadAffinityKey(const std::string& key_file, std::string* key, bool* development,
                     std::string* error);

// The admin port's bearer token (--admin-token-file): the file's contents
// without surrounding whitespace. It goes into an Authorization header, so
// visible ASCII only. False with `error` naming the flag when the file is
// unreadable, empty or holds other bytes.
bool LoadAdminToken(const std::string& path, std::string* token, std::string* error);

}  // namespace kwd::cli
