#pragma once

// The seam for `kwd-controller serve`: the serve mode (file watch, Kubernetes
// watch, gRPC snapshot server, admin port) replaces serve.cc. It receives the
// arguments after "serve" and returns the process exit code.

#include <ostream>
#include <string>
#include <vector>

namespace kwd::cli {

int RunServe(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kwd::cli
