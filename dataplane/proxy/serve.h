#pragma once

#include <iosfwd>

namespace kwd::proxy {

// `kwd-proxy serve ...` (argv[0] is "serve"): runs until SIGTERM or SIGINT,
// reloads --snapshot FILE on SIGHUP. Exit codes: 0 after a clean shutdown,
// 1 when it cannot start, 2 for usage errors.
int RunServe(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace kwd::proxy
